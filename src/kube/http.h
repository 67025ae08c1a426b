// The HTTP transport under kube::Client (internal): libcurl handles kept in a pool so that
// their connections are reused, TLS from PEM in memory, and every transfer driven through a
// multi handle that a stop token interrupts at once. It knows nothing of Kubernetes: no retries,
// no JSON.
//
// Thread safety: one HttpTransport is used by any number of threads at once; each call takes
// its own handle.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::kube::internal {

struct TlsOptions {
  std::string ca_pem;  // empty: the system's trust store
  std::string client_cert_pem;
  std::string client_key_pem;
  bool insecure_skip_verify = false;
};

struct HttpRequest {
  std::string_view method;  // "GET", "POST", ...
  std::string url;
  std::vector<std::string> headers;      // "Name: value"
  std::string_view body;                 // sent when not empty, or for POST/PUT/PATCH
  std::chrono::milliseconds timeout{0};  // the whole exchange; 0: none
};

// How an exchange ended below HTTP.
enum class TransportOutcome {
  kOk,             // a complete response (any status) was received
  kConnectFailed,  // no connection could be made: the request was never sent
  kBroken,         // the connection failed after it was made (the server may have acted)
  kTimeout,        // the deadline passed after the connection was made
  kTlsFailed,      // the TLS handshake or the peer's certificate failed verification
  kStopped,        // the stop token (or, streaming, the data callback) ended it
};

struct HttpResponse {
  TransportOutcome outcome = TransportOutcome::kOk;
  std::string transport_error;  // libcurl's description when outcome is not kOk
  long status = 0;              // 0 when no status line arrived
  std::string body;             // for Stream: only for a status outside 200-299
  std::string content_type;
  std::string retry_after;   // the Retry-After header's value, if any
  long new_connections = 0;  // connections opened for this exchange (0: reused one)
};

class HttpTransport {
 public:
  HttpTransport(TlsOptions tls, std::string user_agent, std::chrono::milliseconds connect_timeout);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // One exchange on a pooled handle (reusing its kept-alive connection when it has one). A stop
  // request aborts it at once, wherever it is (connecting, sending, waiting, receiving): the
  // outcome is kStopped and that connection is closed.
  HttpResponse Perform(const HttpRequest& request, std::stop_token stop = {});

  // A streamed GET. While the status is 2xx, `on_data` receives the body as it arrives, on the
  // calling thread and never from inside libcurl; returning false ends the stream (kStopped). A
  // stop request ends it at once (kStopped). `on_data` is never called for other statuses:
  // their body is collected in the response. The connection is not pooled.
  HttpResponse Stream(const HttpRequest& request,
                      const std::function<bool(std::string_view)>& on_data, std::stop_token stop);

 private:
  struct Handle;
  std::unique_ptr<Handle> Acquire();
  void Release(std::unique_ptr<Handle> h);
  void Setup(Handle& h, const HttpRequest& request, bool stream);
  // Runs the transfer on `h` to its end; `on_data` receives a 2xx stream's body (nullptr for an
  // exchange, whose body is collected).
  HttpResponse Transfer(Handle& h, const HttpRequest& request,
                        const std::function<bool(std::string_view)>* on_data, std::stop_token stop);

  const TlsOptions tls_;
  const std::string user_agent_;
  const std::chrono::milliseconds connect_timeout_;
  std::mutex mu_;
  std::vector<std::unique_ptr<Handle>> pool_;
};

// "%XX" for every byte outside A-Z a-z 0-9 - . _ ~ (RFC 3986 unreserved), for query values.
std::string UrlEncode(std::string_view s);

}  // namespace hami::kube::internal
