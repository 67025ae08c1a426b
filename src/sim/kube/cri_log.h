// Container logs as the kubelet reads them for pods/log: the CRI log files a container runtime
// (containerd) writes, and the choice among a container's files. Pure functions over text and
// names, no I/O; safe to call from any thread.
//
// The layout (the kubelet's): <pod log dir>/<namespace>_<pod name>_<pod uid>/<container>/
// <restart count>.log, one file per start of the container ("0.log", "1.log", ...). The
// current log is the highest count; the previous log the highest count below it.
//
// The CRI log format: one entry per line,
//   <timestamp> <stream> <tag> <content>
// timestamp RFC 3339 with nanoseconds ("2026-12-07T10:00:00.123456789Z"), stream "stdout" or
// "stderr", tag "F" (a full line: the output had a newline after the content) or "P" (partial:
// the content continues in the next entry, no newline between them); the tag may carry more
// ':'-separated fields after the first ("F:x"), which are ignored, as the kubelet ignores
// them. The content is the rest of the line, spaces included, and may be empty.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "kube/time.h"

namespace hami::sim::kube {

enum class LogTimestamps { kOmit, kPrefix };

struct CriLogOptions {
  // kPrefix: each output line starts with the timestamp of the entry that began it, in
  // RFC 3339 with nanoseconds as Go's time.RFC3339Nano writes it (UTC, trailing zeros of the
  // fraction dropped, no fraction when it is zero), and a space: what `kubectl logs
  // --timestamps` shows.
  LogTimestamps timestamps = LogTimestamps::kOmit;
  // Entries stamped before this instant are left out (sinceSeconds, sinceTime); an entry
  // stamped exactly at it is kept.
  std::optional<hami::kube::WallTime> since;
  // The last N output lines (after decoding and the since filter; a P entry and the F entry
  // that ends it are one line); 0 answers nothing.
  std::optional<int64_t> tail_lines;
  // At most this many bytes of the output, cut anywhere (after tail_lines).
  std::optional<int64_t> limit_bytes;
};

struct CriLogOutput {
  std::string text;  // the container's output
  // Lines of the file that are not a CRI entry and were skipped: fewer than three spaces, a
  // stream other than stdout or stderr, a tag other than P or F, a timestamp that does not
  // parse. first_malformed_line is the 1-based number of the first of them (0: none).
  size_t malformed_lines = 0;
  size_t first_malformed_line = 0;
};

// Turns the text of one CRI log file back into the container's output: the contents in file
// order, a "\n" after each F entry. The last line may lack its newline (an entry being
// written); it is decoded like the others.
CriLogOutput DecodeCriLog(std::string_view file_text, const CriLogOptions& options);

// The restart count of a file named "<count>.log" (decimal, no sign, no leading zero: the
// kubelet's "%d.log"); nullopt for any other name ("01.log", "0.log.20261207-100000",
// "0.log.gz", "x.log").
std::optional<int64_t> ParseRestartLogName(std::string_view file_name);

struct ContainerLogFiles {
  std::optional<int64_t> current;   // the highest restart count among the files
  std::optional<int64_t> previous;  // the highest count below current
};

// The current and previous log among the names in a container's log directory; names that
// are not "<count>.log" are ignored.
ContainerLogFiles PickContainerLogFiles(std::span<const std::string> file_names);

// "<count>.log".
std::string RestartLogName(int64_t restart_count);

}  // namespace hami::sim::kube
