// The accepted TCP connections of this process, found by their endpoints. cpp-httplib does not
// hand a request's socket to its handler; a watch stream needs it to notice a client that has
// gone away while nothing is written (and stopping needs it to end idle keep-alive
// connections at once). Linux only (/proc/self/fd).
#pragma once

#include <string_view>
#include <vector>

namespace hami::sim::kube {

// The descriptor of the connected socket whose local and remote endpoints are these
// (addresses in numeric form, as cpp-httplib writes them into a Request), or -1. The descriptor
// stays owned by the server; it is valid while its request is being handled.
int FindConnectionSocket(std::string_view local_addr, int local_port, std::string_view remote_addr,
                         int remote_port);

// The connected (accepted) sockets whose local port is `local_port`.
std::vector<int> ConnectionSockets(int local_port);

// Whether the peer of `fd` has closed its side (or the socket failed); never blocks.
bool PeerClosed(int fd);

}  // namespace hami::sim::kube
