#include "state/sharded_layout.h"

#include <algorithm>
#include <sstream>

#include "xlaunch/error.h"

namespace xlaunch::checkpoint {

int64_t PieceLayout::numel() const {
  int64_t n = 0;
  for (const NamedSegment& s : segments) n += s.length;
  return n;
}

namespace {

void write_rank(std::ostream& os, int rank, const std::vector<std::vector<PieceLayout>>& groups) {
  for (size_t g = 0; g < groups.size(); ++g) {
    os << "rank " << rank << " group " << g << " pieces " << groups[g].size() << "\n";
    for (const PieceLayout& p : groups[g]) {
      os << "piece " << p.model << " " << p.segments.size() << "\n";
      for (const NamedSegment& s : p.segments) os << "segment " << s.offset << " " << s.length << " " << s.param << "\n";
    }
  }
}

// The layout's lines in order, each read as words ("<word> <number>...") and a rest (a name).
class Lines {
 public:
  Lines(const std::string& text, const std::string& path) : in_(text), path_(path) {}
  bool next() {
    if (!std::getline(in_, line_)) return false;
    ++number_;
    pos_ = 0;
    return true;
  }
  // The next word must be `expected`.
  void expect(const std::string& expected) {
    if (word() != expected) fail("expected '" + expected + "'");
  }
  int64_t integer(int64_t min = 0) {
    const std::string t = word();
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != t.size() || v < min) fail("expected a number of at least " + std::to_string(min));
    return v;
  }
  // The rest of the line: a parameter's name, which may hold spaces.
  std::string name() {
    if (pos_ >= line_.size()) fail("expected a parameter name");
    std::string out = line_.substr(pos_);
    pos_ = line_.size();
    return out;
  }
  const std::string& line() const { return line_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw UsageError("load_state: " + path_ + " line " + std::to_string(number_) + " ('" + line_ + "'): " + what +
                     ". The checkpoint's sharded layout is damaged; resume from another checkpoint");
  }
  // Up to the next space.
  std::string word() {
    const size_t end = std::min(line_.find(' ', pos_), line_.size());
    std::string t = line_.substr(pos_, end - pos_);
    pos_ = end < line_.size() ? end + 1 : end;
    return t;
  }

 private:
  std::istringstream in_;
  std::string path_;
  std::string line_;
  size_t pos_ = 0;
  int number_ = 0;
};

}  // namespace

std::string rank_layout_text(int rank, const std::vector<std::vector<PieceLayout>>& groups) {
  std::ostringstream os;
  write_rank(os, rank, groups);
  return os.str();
}

std::string layout_text(const OptimizerLayout& layout, const char* header) {
  std::ostringstream os;
  os << header << "\nworld_size " << layout.world << "\nzero_stage " << layout.stage << "\ngroups " << layout.groups
     << "\n";
  for (const ParamLayout& p : layout.params)
    os << "param " << p.group << " " << p.model << " " << p.numel << " " << p.name << "\n";
  for (size_t r = 0; r < layout.pieces.size(); ++r) write_rank(os, static_cast<int>(r), layout.pieces[r]);
  return os.str();
}

OptimizerLayout parse_layout(const std::string& text, const std::string& path, const char* header_line) {
  Lines in(text, path);
  OptimizerLayout out;
  if (!in.next() || in.line() != header_line) in.fail(std::string("expected '") + header_line + "'");
  auto header = [&](const char* word, int64_t min) {
    if (!in.next()) in.fail(std::string("expected '") + word + "'");
    in.expect(word);
    return static_cast<int>(in.integer(min));
  };
  out.world = header("world_size", 1);
  out.stage = header("zero_stage", 0);
  out.groups = header("groups", 0);
  out.pieces.assign(static_cast<size_t>(out.world), std::vector<std::vector<PieceLayout>>(static_cast<size_t>(out.groups)));
  std::vector<std::vector<bool>> seen(static_cast<size_t>(out.world), std::vector<bool>(static_cast<size_t>(out.groups)));
  while (in.next()) {
    const std::string word = in.word();
    if (word == "param") {
      ParamLayout p;
      p.group = static_cast<int>(in.integer(0));
      if (p.group >= out.groups) in.fail("group " + std::to_string(p.group) + " of " + std::to_string(out.groups));
      p.model = static_cast<size_t>(in.integer(0));
      p.numel = in.integer(0);
      p.name = in.name();
      out.params.push_back(std::move(p));
      continue;
    }
    if (word != "rank") in.fail("expected 'param' or 'rank'");
    const int64_t r = in.integer(0);
    in.expect("group");
    const int64_t g = in.integer(0);
    in.expect("pieces");
    const int64_t n = in.integer(0);
    if (r >= out.world || g >= out.groups || seen[r][g]) in.fail("out of range, or repeated");
    seen[r][g] = true;
    for (int64_t k = 0; k < n; ++k) {
      if (!in.next()) in.fail("the file ends inside rank " + std::to_string(r) + "'s pieces");
      in.expect("piece");
      PieceLayout piece;
      piece.model = static_cast<size_t>(in.integer(0));
      const int64_t segments = in.integer(1);
      for (int64_t s = 0; s < segments; ++s) {
        if (!in.next()) in.fail("the file ends inside a piece");
        in.expect("segment");
        NamedSegment seg;
        seg.offset = in.integer(0);
        seg.length = in.integer(1);
        seg.param = in.name();
        piece.segments.push_back(std::move(seg));
      }
      out.pieces[r][g].push_back(std::move(piece));
    }
  }
  for (int r = 0; r < out.world; ++r)
    for (int g = 0; g < out.groups; ++g)
      if (!seen[r][g])
        throw UsageError("load_state: " + path + " lists no pieces of rank " + std::to_string(r) + " in group " +
                         std::to_string(g) + ". The checkpoint's sharded layout is incomplete; resume from another checkpoint");
  return out;
}

SavedIndex::SavedIndex(const OptimizerLayout& saved) {
  for (size_t r = 0; r < saved.pieces.size(); ++r)
    for (size_t g = 0; g < saved.pieces[r].size(); ++g)
      for (size_t k = 0; k < saved.pieces[r][g].size(); ++k) {
        const PieceLayout& p = saved.pieces[r][g][k];
        int64_t at = 0;
        for (const NamedSegment& s : p.segments) {
          spans_[{p.model, s.param}].push_back(Span{s.offset, s.length, static_cast<int>(r), static_cast<int>(g), k, at});
          at += s.length;
        }
      }
  for (auto& [key, spans] : spans_)
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) { return a.offset < b.offset; });
}

std::vector<Chunk> SavedIndex::chunks(const PieceLayout& target) const {
  std::vector<Chunk> out;
  int64_t at = 0;  // in the target
  for (const NamedSegment& s : target.segments) {
    const auto it = spans_.find({target.model, s.param});
    if (it != spans_.end()) {
      const std::vector<Span>& spans = it->second;
      // The first span that ends after the segment starts.
      auto span = std::upper_bound(spans.begin(), spans.end(), s.offset,
                                   [](int64_t off, const Span& sp) { return off < sp.offset + sp.length; });
      for (; span != spans.end() && span->offset < s.offset + s.length; ++span) {
        const int64_t from = std::max(s.offset, span->offset);
        const int64_t to = std::min(s.offset + s.length, span->offset + span->length);
        out.push_back(Chunk{span->rank, span->group, span->piece, span->saved_offset + (from - span->offset),
                            at + (from - s.offset), to - from});
      }
    }
    at += s.length;
  }
  return out;
}

}  // namespace xlaunch::checkpoint
