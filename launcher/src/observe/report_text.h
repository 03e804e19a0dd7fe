// The words and numbers the report and its advice share (report.cpp, advice.cpp): fixed-point
// numbers, percentages, gains, rank lists.
#pragma once

#include <string>
#include <vector>

#include "xlaunch/status/flight_recorder.h"

namespace xlaunch::launcher {

// v with `digits` decimals: fixed(2.345, 1) = "2.3".
std::string fixed(double v, int digits);

// "12.5%"
std::string pct(double v);

// "2.0x": how much faster a step gets when a share `p_pct` of it goes away.
std::string speedup(double p_pct);

// "rank 3" or "ranks 0, 2": the status library's, as every message writes them.
using status::rank_list;

double median(std::vector<double> v);

}  // namespace xlaunch::launcher
