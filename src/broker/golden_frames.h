// Golden frames of protocol version 1, written out byte by byte (not produced by the codec),
// shared by the codec, server and client tests. Each names the outcome both sides must agree
// on.
#pragma once

#include <cstdint>
#include <vector>

#include "broker/protocol.h"

namespace hami::broker::golden {

// A valid v1 GET_PID request.
inline const std::vector<uint8_t> kRequestV1 = {'H', 'P', 'I', 'D', 0x00, 0x01, 0x00, 0x01};
// The success response for PID 8011 (0x00001F4B).
inline const std::vector<uint8_t> kResponsePid8011 = {'H',  'P',  'I',  'D',  0x00, 0x01,
                                                      0x00, 0x00, 0x00, 0x00, 0x1F, 0x4B};
// The answer to an invalid request: status 1, PID 0.
inline const std::vector<uint8_t> kResponseInvalid = {'H',  'P',  'I',  'D',  0x00, 0x01,
                                                      0x00, 0x01, 0x00, 0x00, 0x00, 0x00};

// Requests the server answers with kResponseInvalid.
inline const std::vector<uint8_t> kRequestBadMagic = {'H', 'P', 'I', 'X', 0x00, 0x01, 0x00, 0x01};
inline const std::vector<uint8_t> kRequestBadVersion = {'H', 'P', 'I', 'D', 0x00, 0x02, 0x00, 0x01};
inline const std::vector<uint8_t> kRequestBadCommand = {'H', 'P', 'I', 'D', 0x00, 0x01, 0x00, 0x02};
// Six bytes then the end of the stream: no request; the server closes without an answer.
inline const std::vector<uint8_t> kRequestTruncated = {'H', 'P', 'I', 'D', 0x00, 0x01};
// A valid request followed by four more bytes: answered as kRequestV1 (the extra bytes are
// never read).
inline const std::vector<uint8_t> kRequestExtraBytes = {'H',  'P',  'I',  'D',  0x00, 0x01,
                                                        0x00, 0x01, 0xFF, 0xFF, 0xFF, 0xFF};

// Responses the client must not trust.
inline const std::vector<uint8_t> kResponseBadMagic = {'H',  'P',  'I',  'X',  0x00, 0x01,
                                                       0x00, 0x00, 0x00, 0x00, 0x1F, 0x4B};
inline const std::vector<uint8_t> kResponseBadVersion = {'H',  'P',  'I',  'D',  0x00, 0x02,
                                                         0x00, 0x00, 0x00, 0x00, 0x1F, 0x4B};
inline const std::vector<uint8_t> kResponsePidZero = {'H',  'P',  'I',  'D',  0x00, 0x01,
                                                      0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
inline const std::vector<uint8_t> kResponsePidAboveIntMax = {'H',  'P',  'I',  'D',  0x00, 0x01,
                                                             0x00, 0x00, 0x80, 0x00, 0x00, 0x00};
// Eleven bytes then the end of the stream.
inline const std::vector<uint8_t> kResponseTruncated = {'H',  'P',  'I',  'D',  0x00, 0x01,
                                                        0x00, 0x00, 0x00, 0x00, 0x1F};
// A success for PID 8011 followed by extra bytes: PID 8011 (the extra bytes are never read).
inline const std::vector<uint8_t> kResponseExtraBytes = {'H',  'P',  'I',  'D',  0x00, 0x01, 0x00,
                                                         0x00, 0x00, 0x00, 0x1F, 0x4B, 0x00};

}  // namespace hami::broker::golden
