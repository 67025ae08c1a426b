#include "kube/http.h"

#include <curl/curl.h>
#include <strings.h>

#include <cstring>
#include <mutex>
#include <optional>

namespace hami::kube::internal {
namespace {

constexpr size_t kMaxBodyBytes = size_t(1) << 30;           // a whole-cluster list stays far below
constexpr size_t kMaxErrorBodyBytes = size_t(1) << 20;      // an error body of a stream
constexpr size_t kMaxPendingStreamBytes = size_t(8) << 20;  // then the transfer pauses
constexpr size_t kMaxPooledHandles = 32;

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_ALL); });
}

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

TransportOutcome Classify(CURLcode code, CURL* easy) {
  switch (code) {
    case CURLE_OK:
      return TransportOutcome::kOk;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
      return TransportOutcome::kConnectFailed;
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_INVALIDCERTSTATUS:
    case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
    case CURLE_SSL_ENGINE_NOTFOUND:
    case CURLE_SSL_ENGINE_SETFAILED:
    case CURLE_SSL_ENGINE_INITFAILED:
      return TransportOutcome::kTlsFailed;
    case CURLE_OPERATION_TIMEDOUT: {
      // Timed out before the request could be sent (connecting, TLS handshake): nothing reached
      // the server.
      curl_off_t pretransfer = 0;
      curl_easy_getinfo(easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer);
      return pretransfer == 0 ? TransportOutcome::kConnectFailed : TransportOutcome::kTimeout;
    }
    default:
      return TransportOutcome::kBroken;
  }
}

}  // namespace

// An easy handle and the multi handle that drives it; the multi handle's connection cache is
// what keeps this handle's connections alive between transfers.
struct HttpTransport::Handle {
  CURL* easy = nullptr;
  CURLM* multi = nullptr;
  curl_slist* headers = nullptr;
  char error[CURL_ERROR_SIZE];
  HttpResponse* response = nullptr;
  bool stream = false;
  std::string pending;  // streamed body not yet handed on
  bool paused = false;
  bool too_large = false;

  Handle() : easy(curl_easy_init()), multi(curl_multi_init()) {}
  ~Handle() {
    if (multi != nullptr) curl_multi_cleanup(multi);  // closes the cached connections
    if (easy != nullptr) curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
  }

  bool StreamingBody() const { return stream && response->status >= 200 && response->status < 300; }

  static size_t OnHeader(char* data, size_t size, size_t n, void* self) {
    auto* h = static_cast<Handle*>(self);
    std::string_view line(data, size * n);
    if (line.rfind("HTTP/", 0) == 0) {  // a new response (after a 100 Continue, a redirect)
      h->response->content_type.clear();
      h->response->retry_after.clear();
      return size * n;
    }
    if (TrimSpace(line).empty()) {  // end of this response's headers
      long status = 0;
      curl_easy_getinfo(h->easy, CURLINFO_RESPONSE_CODE, &status);
      h->response->status = status;
      return size * n;
    }
    size_t colon = line.find(':');
    if (colon == line.npos) return size * n;
    std::string_view name = line.substr(0, colon);
    std::string_view value = TrimSpace(line.substr(colon + 1));
    if (name.size() == 12 && strncasecmp(name.data(), "content-type", 12) == 0) {
      h->response->content_type = std::string(value);
    } else if (name.size() == 11 && strncasecmp(name.data(), "retry-after", 11) == 0) {
      h->response->retry_after = std::string(value);
    }
    return size * n;
  }

  static size_t OnBody(char* data, size_t size, size_t n, void* self) {
    auto* h = static_cast<Handle*>(self);
    size_t bytes = size * n;
    if (h->StreamingBody()) {
      if (h->pending.size() >= kMaxPendingStreamBytes) {
        h->paused = true;
        return CURL_WRITEFUNC_PAUSE;
      }
      h->pending.append(data, bytes);
      return bytes;
    }
    size_t cap = h->stream ? kMaxErrorBodyBytes : kMaxBodyBytes;
    if (h->response->body.size() + bytes > cap) {
      h->too_large = true;
      return 0;  // CURLE_WRITE_ERROR
    }
    h->response->body.append(data, bytes);
    return bytes;
  }
};

HttpTransport::HttpTransport(TlsOptions tls, std::string user_agent,
                             std::chrono::milliseconds connect_timeout)
    : tls_(std::move(tls)), user_agent_(std::move(user_agent)), connect_timeout_(connect_timeout) {
  GlobalInit();
}

HttpTransport::~HttpTransport() = default;

std::unique_ptr<HttpTransport::Handle> HttpTransport::Acquire() {
  {
    std::lock_guard lock(mu_);
    if (!pool_.empty()) {
      auto h = std::move(pool_.back());
      pool_.pop_back();
      return h;
    }
  }
  return std::make_unique<Handle>();
}

void HttpTransport::Release(std::unique_ptr<Handle> h) {
  std::lock_guard lock(mu_);
  if (pool_.size() < kMaxPooledHandles) pool_.push_back(std::move(h));
}

void HttpTransport::Setup(Handle& h, const HttpRequest& request, bool stream) {
  CURL* e = h.easy;
  curl_easy_reset(e);  // the live connections stay in the multi handle's cache
  curl_slist_free_all(h.headers);
  h.headers = nullptr;
  for (const std::string& header : request.headers) {
    h.headers = curl_slist_append(h.headers, header.c_str());
  }
  h.headers = curl_slist_append(h.headers, "Expect:");  // no 100-continue round trip
  h.stream = stream;
  h.pending.clear();
  h.paused = false;
  h.too_large = false;
  h.error[0] = '\0';

  curl_easy_setopt(e, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, long(CURL_HTTP_VERSION_1_1));
  curl_easy_setopt(e, CURLOPT_USERAGENT, user_agent_.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, h.headers);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, h.error);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, long(connect_timeout_.count()));
  if (request.timeout.count() > 0) {
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, long(request.timeout.count()));
  }
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPIDLE, 30L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPINTVL, 15L);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Handle::OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &h);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Handle::OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &h);

  std::string_view m = request.method;
  bool has_body = !request.body.empty() || m == "POST" || m == "PUT" || m == "PATCH";
  if (m == "GET") {
    curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
  } else {
    if (m == "POST") {
      curl_easy_setopt(e, CURLOPT_POST, 1L);
    } else {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, std::string(m).c_str());
    }
    if (has_body) {
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.size()));
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, request.body.data());
    }
  }

  if (request.url.rfind("https://", 0) == 0) {
    if (tls_.insecure_skip_verify) {
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
      curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    } else if (!tls_.ca_pem.empty()) {
      curl_blob ca{const_cast<char*>(tls_.ca_pem.data()), tls_.ca_pem.size(), CURL_BLOB_NOCOPY};
      curl_easy_setopt(e, CURLOPT_CAINFO_BLOB, &ca);
      curl_easy_setopt(e, CURLOPT_CAPATH, nullptr);
    }
    if (!tls_.client_cert_pem.empty()) {
      curl_blob cert{const_cast<char*>(tls_.client_cert_pem.data()), tls_.client_cert_pem.size(),
                     CURL_BLOB_NOCOPY};
      curl_blob key{const_cast<char*>(tls_.client_key_pem.data()), tls_.client_key_pem.size(),
                    CURL_BLOB_NOCOPY};
      curl_easy_setopt(e, CURLOPT_SSLCERT_BLOB, &cert);
      curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
      curl_easy_setopt(e, CURLOPT_SSLKEY_BLOB, &key);
      curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    }
  }
}

namespace {

void Finish(CURLcode code, CURL* easy, const char* error_buffer, bool too_large, HttpResponse* r) {
  long connects = 0;
  curl_easy_getinfo(easy, CURLINFO_NUM_CONNECTS, &connects);
  r->new_connections = connects;
  r->outcome = Classify(code, easy);
  if (r->outcome != TransportOutcome::kOk) {
    r->transport_error = curl_easy_strerror(code);
    if (too_large) {
      r->transport_error += ": response body too large";
    } else if (error_buffer[0] != '\0') {
      r->transport_error += ": ";
      r->transport_error += error_buffer;
    }
  }
}

}  // namespace

HttpResponse HttpTransport::Transfer(Handle& h, const HttpRequest& request,
                                     const std::function<bool(std::string_view)>* on_data,
                                     std::stop_token stop) {
  HttpResponse response;
  if (h.easy == nullptr || h.multi == nullptr) {
    response.outcome = TransportOutcome::kBroken;
    response.transport_error = "curl init failed";
    return response;
  }
  h.response = &response;
  Setup(h, request, /*stream=*/on_data != nullptr);
  curl_multi_add_handle(h.multi, h.easy);
  std::optional<CURLcode> done;
  bool stopped = false;
  {
    std::stop_callback wake(stop, [multi = h.multi] { curl_multi_wakeup(multi); });
    while (!done) {
      if (stop.stop_requested()) {
        stopped = true;
        break;
      }
      int running = 0;
      curl_multi_perform(h.multi, &running);
      while (CURLMsg* msg = curl_multi_info_read(h.multi, &running)) {
        if (msg->msg == CURLMSG_DONE) done = msg->data.result;
      }
      if (!h.pending.empty()) {
        std::string chunk = std::move(h.pending);
        h.pending.clear();
        if (!(*on_data)(chunk)) {
          stopped = true;
          break;
        }
      }
      if (h.paused) {
        h.paused = false;
        curl_easy_pause(h.easy, CURLPAUSE_CONT);
        continue;
      }
      // At most 100 ms, less when libcurl has a timer due sooner; a stop request wakes it.
      if (!done) curl_multi_poll(h.multi, nullptr, 0, 100, nullptr);
    }
  }
  if (stopped) {
    response.outcome = TransportOutcome::kStopped;
    response.transport_error = "stopped";
  } else {
    long status = 0;
    curl_easy_getinfo(h.easy, CURLINFO_RESPONSE_CODE, &status);
    if (status != 0) response.status = status;
    Finish(*done, h.easy, h.error, h.too_large, &response);
  }
  curl_multi_remove_handle(h.multi, h.easy);  // mid-transfer: that connection is closed
  h.response = nullptr;
  return response;
}

HttpResponse HttpTransport::Perform(const HttpRequest& request, std::stop_token stop) {
  std::unique_ptr<Handle> h = Acquire();
  HttpResponse response = Transfer(*h, request, nullptr, std::move(stop));
  Release(std::move(h));
  return response;
}

HttpResponse HttpTransport::Stream(const HttpRequest& request,
                                   const std::function<bool(std::string_view)>& on_data,
                                   std::stop_token stop) {
  Handle h;
  return Transfer(h, request, &on_data, std::move(stop));
}

std::string UrlEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    auto u = uint8_t(c);
    if ((u >= 'A' && u <= 'Z') || (u >= 'a' && u <= 'z') || (u >= '0' && u <= '9') || c == '-' ||
        c == '.' || c == '_' || c == '~') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

}  // namespace hami::kube::internal
