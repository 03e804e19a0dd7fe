#include "comm/ragged.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "check.h"
#include "xlaunch/error.h"

namespace xlaunch {
namespace {

constexpr int64_t kHeader = 4;  // ndim, dtype, device type, tag; then kRaggedMaxDims sizes

// Each distinct shape once, with the ranks that hold it, in order of first appearance:
// "rank 0 and 2 have [5, 3] Float on cpu; rank 1 has [5, 4] Float on cpu".
std::string list_shapes(const std::vector<RankShape>& all) {
  std::vector<std::string> order;
  std::map<std::string, std::vector<int>> ranks;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string d = describe(all[r]);
    if (ranks.find(d) == ranks.end()) order.push_back(d);
    ranks[d].push_back(static_cast<int>(r));
  }
  std::ostringstream os;
  for (size_t i = 0; i < order.size(); ++i) {
    const auto& rs = ranks[order[i]];
    os << (i ? "; " : "") << (rs.size() == 1 ? "rank " : "ranks ");
    for (size_t k = 0; k < rs.size(); ++k) os << (k == 0 ? "" : k + 1 == rs.size() ? " and " : ", ") << rs[k];
    os << (rs.size() == 1 ? " has " : " have ") << order[i];
  }
  return os.str();
}

int64_t ndim(const RankShape& s) { return static_cast<int64_t>(s.sizes.size()); }

}  // namespace

std::string describe(const RankShape& s) {
  if (!s.defined) return "an undefined tensor";
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.sizes.size(); ++i) {
    os << (i ? ", " : "");
    if (s.sizes[i] < 0) os << "?";
    else os << s.sizes[i];
  }
  os << "] " << c10::toString(s.dtype) << " on " << c10::DeviceTypeName(s.device, /*lower_case=*/true);
  return os.str();
}

std::vector<RankShape> allgather_shapes(Communicator& comm, const at::Tensor& t, int64_t tag, const at::Device& on) {
  std::vector<int64_t> desc(kHeader + kRaggedMaxDims, -1);
  // An undefined tensor travels as -1 dims, so the others learn of it instead of waiting.
  desc[0] = t.defined() ? t.dim() : -1;
  desc[1] = static_cast<int64_t>(t.defined() ? t.scalar_type() : at::kFloat);
  desc[2] = static_cast<int64_t>(t.defined() ? t.device().type() : c10::DeviceType::CPU);
  desc[3] = tag;
  if (t.defined())
    for (int64_t i = 0; i < std::min<int64_t>(t.dim(), kRaggedMaxDims); ++i) desc[kHeader + i] = t.size(i);
  const at::Tensor all = comm.allgather(at::tensor(at::ArrayRef<int64_t>(desc)).to(on)).cpu().contiguous();
  const int64_t* a = all.data_ptr<int64_t>();
  const auto width = static_cast<int64_t>(desc.size());
  std::vector<RankShape> shapes(comm.size());
  for (int r = 0; r < comm.size(); ++r) {
    const int64_t* d = a + r * width;
    RankShape& s = shapes[r];
    s.defined = d[0] >= 0;
    s.sizes.assign(std::max<int64_t>(d[0], 0), -1);
    for (int64_t i = 0; i < std::min(d[0], kRaggedMaxDims); ++i) s.sizes[i] = d[kHeader + i];
    s.dtype = static_cast<at::ScalarType>(d[1]);
    s.device = static_cast<c10::DeviceType>(d[2]);
    s.tag = d[3];
  }
  return shapes;
}

std::string shape_problem(const std::vector<RankShape>& all, const ShapeRule& rule) {
  const RankShape& first = all.at(0);
  std::string what;
  for (size_t r = 0; r < all.size() && what.empty(); ++r) {
    const RankShape& s = all[r];
    if (!s.defined) what = "rank " + std::to_string(r) + " passed an undefined tensor";
    else if (ndim(s) > kRaggedMaxDims)
      what = "rank " + std::to_string(r) + "'s tensor has " + std::to_string(ndim(s)) + " dims, more than the " +
             std::to_string(kRaggedMaxDims) + " supported (reshape it)";
  }
  for (size_t r = 1; r < all.size() && what.empty(); ++r) {
    const RankShape& s = all[r];
    if (rule.same_device && s.device != first.device) what = "they are on different kinds of device";
    else if (ndim(s) != ndim(first)) what = "they have different numbers of dims";
  }
  if (what.empty() && (rule.free_dim < 0 || rule.free_dim >= ndim(first)))
    what = "dim " + std::to_string(rule.free_dim) + " does not exist in tensors of " + std::to_string(ndim(first)) +
           " dims";
  for (size_t r = 1; r < all.size() && what.empty() && !rule.only_ndim; ++r) {
    const RankShape& s = all[r];
    if (s.dtype != first.dtype) what = "they have different dtypes";
    for (int64_t i = 0; i < ndim(s) && what.empty(); ++i)
      if (i != rule.free_dim && s.sizes[i] != first.sizes[i]) what = "they differ in dim " + std::to_string(i);
  }
  return what.empty() ? "" : what + ": " + list_shapes(all);
}

at::Tensor pad_dim(const at::Tensor& t, int64_t dim, int64_t size, const at::Scalar& value, bool pad_first) {
  const int64_t have = t.size(dim);
  if (have == size) return t;
  XLAUNCH_ASSERT(have < size, "pad_dim: the tensor is already larger than the size to pad to");
  std::vector<int64_t> shape = t.sizes().vec();
  shape[dim] = size;
  at::Tensor out = at::full(shape, value, t.options());
  out.narrow(dim, pad_first ? size - have : 0, have).copy_(t);
  return out;
}

at::Tensor concat_rows(const at::Tensor& gathered, const std::vector<int64_t>& rows) {
  std::vector<at::Tensor> parts;
  for (size_t r = 0; r < rows.size(); ++r) parts.push_back(gathered[static_cast<int64_t>(r)].narrow(0, 0, rows[r]));
  return at::cat(parts, 0);
}

std::vector<int64_t> agree_on_rows(Communicator& shapes, const at::Tensor& t, const std::string& call) {
  const std::vector<RankShape> all = allgather_shapes(shapes, t, 0, at::kCPU);
  const std::string problem = shape_problem(all, ShapeRule{});
  if (!problem.empty())
    throw UsageError(call + ": the ranks' tensors may differ in dim 0 only, but " + problem +
                     ". Make them agree in the other dims (pad to a common size with "
                     "acc.pad_across_processes(t, dim), or cut to one), in dtype (t.to(dtype)) and in device "
                     "(t.to(acc.device()))");
  std::vector<int64_t> rows;
  for (const auto& s : all) rows.push_back(s.sizes[0]);
  return rows;
}

at::Tensor gather_agreed_rows(Communicator& data, const at::Tensor& t, const std::vector<int64_t>& rows) {
  const int64_t most = *std::max_element(rows.begin(), rows.end());
  const at::Tensor src = t.contiguous();
  if (std::all_of(rows.begin(), rows.end(), [&](int64_t n) { return n == most; })) {
    // Equal row counts: the allgather alone, as before ragged gathers existed.
    std::vector<int64_t> shape = src.sizes().vec();
    shape[0] = most * data.size();
    return data.allgather(src).reshape(shape);
  }
  return concat_rows(data.allgather(pad_dim(src, 0, most, 0, false)), rows);
}

at::Tensor pad_across(Communicator& shapes, const at::Tensor& t, int64_t dim, const at::Scalar& pad_index,
                      bool pad_first) {
  const int64_t nd = t.defined() ? t.dim() : 0;
  // A negative dim counts from the end, as in PyTorch; one outside [-nd, nd) is left as given, for the error.
  const int64_t d = dim < 0 && dim >= -nd ? dim + nd : dim;
  const std::vector<RankShape> all = allgather_shapes(shapes, t, 0, at::kCPU);
  const std::string problem = shape_problem(all, ShapeRule{d, /*only_ndim=*/true, /*same_device=*/false});
  if (!problem.empty())
    throw UsageError("pad_across_processes(t, dim " + std::to_string(dim) + "): every rank's tensor must have the "
                     "same number of dims, with dim " + std::to_string(dim) + " among them, but " + problem +
                     ". Pass tensors of one rank (number of dims) on every rank, and a dim they have");
  int64_t most = 0;
  for (const auto& s : all) most = std::max(most, s.sizes[d]);
  return pad_dim(t, d, most, pad_index, pad_first);
}

}  // namespace xlaunch
