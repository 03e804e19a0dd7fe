#include "track/number_text.h"
#include "xlaunch/tracking.h"

namespace xlaunch {

std::string HParam::to_string() const {
  switch (kind_) {
    case Kind::Number: return track::shortest(number_);
    case Kind::Bool: return number_ != 0 ? "true" : "false";
    case Kind::String: return text_;
  }
  return text_;
}

}  // namespace xlaunch
