# The monitor's node operations (included by CMakeLists.txt): the priority feedback loop over
# the containers' regions and the cleanup of ended pods' container directories.
hami_cc_library(NAME hami_monitor_ops
  SRCS ${CMAKE_CURRENT_LIST_DIR}/feedback.cc ${CMAKE_CURRENT_LIST_DIR}/cleanup.cc
  DEPS hami::monitor_containers hami::region hami::node_paths hami::common)

hami_cc_test(NAME monitor_feedback_test CONCURRENT LABELS integration
  SRCS ${CMAKE_CURRENT_LIST_DIR}/feedback_test.cc
  DEPS hami::monitor_ops)

hami_cc_test(NAME monitor_cleanup_test LABELS integration
  SRCS ${CMAKE_CURRENT_LIST_DIR}/cleanup_test.cc
  DEPS hami::monitor_ops)
