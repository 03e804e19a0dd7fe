#include "track/tensorboard_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <system_error>

#include "tb_event.pb.h"
#include "tb_hparams_plugin.pb.h"
#include "tb_text_plugin.pb.h"
#include "track/backends.h"
#include "track/record_writer.h"

namespace xlaunch::track {

std::string event_file_name(int64_t seconds, const std::string& host, long pid, int n) {
  char secs[32];
  std::snprintf(secs, sizeof secs, "%010lld", static_cast<long long>(seconds));
  return "events.out.tfevents." + std::string(secs) + "." + host + "." + std::to_string(pid) + "." +
         std::to_string(n);
}

int64_t event_file_seconds(int64_t now, const std::vector<std::string>& names) {
  static const std::string prefix = "events.out.tfevents.";
  int64_t seconds = now;
  for (const auto& name : names) {
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const size_t end = name.find('.', prefix.size());
    const std::string digits = name.substr(prefix.size(), end == std::string::npos ? end : end - prefix.size());
    if (digits.empty() || digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    seconds = std::max<int64_t>(seconds, std::stoll(digits) + 1);
  }
  return seconds;
}

std::string hparams_markdown(const HParams& config) {
  auto cell = [](const std::string& text) {
    std::string out;
    for (char ch : text) {
      if (ch == '|') out += '\\';
      out += ch == '\n' ? ' ' : ch;
    }
    return out;
  };
  std::string md = "| name | value |\n|---|---|\n";
  for (const auto& [name, value] : config) md += "| " + cell(name) + " | " + cell(value.to_string()) + " |\n";
  return md;
}

namespace {

constexpr const char* kFileVersion = "brain.Event:2";
constexpr const char* kTextTag = "hparams/text_summary";
constexpr const char* kSessionStartTag = "_hparams_/session_start_info";

std::vector<std::string> directory_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  if (ec) throw WriteError("cannot read the TensorBoard run directory " + dir + ": " + ec.message(), ec.value());
  return names;
}

std::string host_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) {
    const int err = errno;
    throw WriteError(std::string("gethostname failed (naming a TensorBoard event file): ") + std::strerror(err), err);
  }
  return host;
}

// The run directory made if missing, and this process's new file in it.
std::string create_event_file_path(const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec)
    throw WriteError("cannot create the TensorBoard run directory " + run_dir + ": " + ec.message(), ec.value());
  // Two backends of one process within one second (tests, several trackers) differ in <n>.
  static std::atomic<int> counter{0};
  const int64_t seconds = event_file_seconds(static_cast<int64_t>(std::time(nullptr)), directory_names(run_dir));
  return run_dir + "/" + event_file_name(seconds, host_name(), static_cast<long>(::getpid()), counter++);
}

// An event at (wall_time, step): every event but the file's first.
tensorboard::Event event_at(double wall_time, int64_t step) {
  tensorboard::Event e;
  e.set_wall_time(wall_time);
  e.set_step(step);
  return e;
}

// A new summary value of `e` that TensorBoard's `plugin` shows, the plugin's `content` in its metadata.
tensorboard::Summary::Value* plugin_value(tensorboard::Event& e, const std::string& tag, const std::string& plugin,
                                          const std::string& content) {
  auto* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  auto* data = v->mutable_metadata()->mutable_plugin_data();
  data->set_plugin_name(plugin);
  data->set_content(content);
  return v;
}

class TensorBoardBackend : public Backend {
 public:
  explicit TensorBoardBackend(const std::string& run_dir) : out_(create_event_file_path(run_dir)) {}

  std::string name() const override { return "tensorboard"; }
  std::string where() const override { return out_.path(); }

  void begin(const RunStart& start) override {
    if (!begun_) {
      tensorboard::Event e;
      e.set_wall_time(start.wall_time);
      e.set_file_version(kFileVersion);
      write(e);
    }
    tensorboard::Event e = event_at(start.wall_time, start.first_step);
    auto* log = e.mutable_session_log();
    log->set_status(tensorboard::SessionLog::START);
    log->set_checkpoint_path(start.resumed_from);
    log->set_msg(start.resumed_from.empty() ? "started" : "resumed from " + start.resumed_from);
    write(e);
    if (!begun_ && !start.config.empty()) write_hparams(start);
    begun_ = true;
  }

  void scalars(int64_t step, double wall_time, const std::vector<Scalar>& values) override {
    tensorboard::Event e = event_at(wall_time, step);
    for (const auto& s : values) {
      auto* v = e.mutable_summary()->add_value();
      v->set_tag(s.tag);
      // float32 as TensorBoard stores scalars; NaN and infinities keep their value.
      v->set_simple_value(static_cast<float>(s.value));
      if (scalar_tags_.insert(s.tag).second) v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("scalars");
    }
    write(e);
  }

  void histogram(int64_t step, double wall_time, const Histogram& h) override {
    tensorboard::Event e = event_at(wall_time, step);
    auto* v = e.mutable_summary()->add_value();
    v->set_tag(h.tag);
    auto* histo = v->mutable_histo();
    histo->set_min(h.min);
    histo->set_max(h.max);
    histo->set_num(h.num);
    histo->set_sum(h.sum);
    histo->set_sum_squares(h.sum_squares);
    for (double b : h.bucket_limit) histo->add_bucket_limit(b);
    for (double b : h.bucket) histo->add_bucket(b);
    write(e);
  }

  void flush() override { out_.flush(); }

 private:
  void write(const tensorboard::Event& e) { out_.append(e.SerializeAsString()); }

  void write_hparams(const RunStart& start) {
    tensorboard::Event text = event_at(start.wall_time, start.first_step);
    auto* tv = plugin_value(text, kTextTag, "text", tensorboard::TextPluginData().SerializeAsString());  // version 0
    auto* tensor = tv->mutable_tensor();
    tensor->set_dtype(tensorboard::DT_STRING);
    tensor->mutable_tensor_shape();  // no dims: one string
    tensor->add_string_val(hparams_markdown(start.config));
    write(text);

    tensorboard::hparams::HParamsPluginData data;
    auto* info = data.mutable_session_start_info();
    info->set_start_time_secs(start.wall_time);
    for (const auto& [name, value] : start.config) {
      google::protobuf::Value& v = (*info->mutable_hparams())[name];
      switch (value.kind()) {
        case HParam::Kind::Number: v.set_number_value(value.number()); break;
        case HParam::Kind::Bool: v.set_bool_value(value.number() != 0); break;
        case HParam::Kind::String: v.set_string_value(value.text()); break;
      }
    }
    tensorboard::Event session = event_at(start.wall_time, start.first_step);
    auto* sv = plugin_value(session, kSessionStartTag, "hparams", data.SerializeAsString());
    // The plugin's data is all in the metadata; the value is an empty float tensor, as
    // TensorBoard's own hparams writer leaves it.
    auto* empty = sv->mutable_tensor();
    empty->set_dtype(tensorboard::DT_FLOAT);
    empty->mutable_tensor_shape()->add_dim()->set_size(0);
    write(session);
  }

  RecordWriter out_;
  bool begun_ = false;
  std::set<std::string> scalar_tags_;
};

}  // namespace

std::unique_ptr<Backend> make_tensorboard_backend(const std::string& run_dir) {
  return std::make_unique<TensorBoardBackend>(run_dir);
}

}  // namespace xlaunch::track
