# `cmake --install <build> [--prefix P] [--component C]` (and `make install`): the programs
# and libraries a host or an image runs, in the layout `hami` and hami-sim look for beside
# their own executable (src/cli/paths.cc). docs/install-host.md describes it.
#
#   P/bin/hami, hami-scheduler, hami-device-plugin, hami-monitor,
#         hami-dra-plugin                                                component node
#   P/lib/hami/libvgpu.so                                                component node
#   P/bin/hami-sim, hami-sim-pause, hami-demo, hami-memory-demo, hami-sm-demo   component sim
#   P/lib/hami/sim/libcuda.so.1, libnvidia-ml.so.1 (+ .so links)        component sim
#   P/share/hami/config/   deploy/base/config: what `hami sim cluster up` configures with
#   P/share/hami/examples/ the example pods                              component sim
#
# The node component is what a GPU host or the image needs; sim adds the simulated GPU and
# cluster, to try everything on a machine without one. No component installs tests.
#
# lib/hami, not the distribution's library directory: libvgpu.so is preloaded by path, never
# found by the dynamic loader's search, and it must not sit where every program would see it.
install(TARGETS hami hami-scheduler hami-device-plugin hami-monitor hami-dra-plugin
  RUNTIME DESTINATION bin COMPONENT node)
install(TARGETS vgpu LIBRARY DESTINATION lib/hami COMPONENT node)

install(TARGETS hami-sim hami_sim_pause hami-demo hami-memory-demo hami-sm-demo
  RUNTIME DESTINATION bin COMPONENT sim)
install(TARGETS hami_sim_cuda hami_sim_nvml LIBRARY DESTINATION lib/hami/sim COMPONENT sim)
# The plain-name links, as the build makes them (file(INSTALL) keeps a link a link).
install(FILES ${HAMI_SIM_LIB_DIR}/libcuda.so ${HAMI_SIM_LIB_DIR}/libnvidia-ml.so
  DESTINATION lib/hami/sim COMPONENT sim)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/deploy/base/config/ DESTINATION share/hami/config
  COMPONENT sim)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples/ DESTINATION share/hami/examples
  COMPONENT sim FILES_MATCHING PATTERN "*.yaml")
