#include "common/result.h"

namespace hami {}  // namespace hami
