// Every setting's default is declared once, with its XLAUNCH_* variable (env_vars.h). These tests
// fail when any other place that holds the setting starts from another value: the config schema
// (through what the launch plan exports for a default config, so enum spellings and number
// formats count too) and the runtime's option structs (against what from_env() reads from an
// environment where no XLAUNCH_* variable is set).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <string>

#include "launch/launch_plan.h"
#include "watch/watchdog.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/config/launch_config.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/loader.h"

namespace env = xlaunch::env;

namespace {

// Per-launch values come from the launcher's Environment (XLAUNCH_RESUME: `xlaunch run --resume`
// and restarts), not from the config: no default to agree on.
bool per_launch(const env::Var& v) {
  return &v == &env::kRunId || &v == &env::kRestartCount || &v == &env::kStatusDir || &v == &env::kConfigFile ||
         &v == &env::kResume;
}

void unset_contract() {
  for (const env::Var* v : env::kAll) unsetenv(v->name);
}

}  // namespace

TEST(Defaults, DefaultConfigExportsEveryDeclaredDefault) {
  const auto exported = xlaunch::launcher::exported_env(xlaunch::config::LaunchConfig{}, {});
  const std::map<std::string, std::string> by_name(exported.begin(), exported.end());
  for (const env::Var* v : env::kAll) {
    if (per_launch(*v)) continue;
    ASSERT_EQ(by_name.count(v->name), 1u) << v->name;
    EXPECT_EQ(by_name.at(v->name), v->default_value)
        << v->name << ": config/launch_config.h's default differs from env_vars.h's";
  }
}

TEST(Defaults, RuntimeOptionsStartFromTheDeclaredDefaults) {
  unset_contract();
  const xlaunch::AcceleratorOptions built, read = xlaunch::AcceleratorOptions::from_env();
  EXPECT_EQ(built.mixed_precision, read.mixed_precision);
  EXPECT_EQ(built.gradient_accumulation_steps, read.gradient_accumulation_steps);
  EXPECT_EQ(built.cpu, read.cpu);
  EXPECT_EQ(built.gpu_ids, read.gpu_ids);
  EXPECT_EQ(built.broadcast_buffers, read.broadcast_buffers);
  EXPECT_EQ(built.sync_batchnorm, read.sync_batchnorm);
  EXPECT_EQ(built.ddp.bucket_cap_mb, read.ddp.bucket_cap_mb);
  EXPECT_EQ(built.ddp.find_unused_parameters, read.ddp.find_unused_parameters);
  EXPECT_EQ(built.ddp.comm_hook, read.ddp.comm_hook);
  EXPECT_EQ(built.ddp.powersgd_rank, read.ddp.powersgd_rank);
  EXPECT_EQ(built.ddp.powersgd_start_step, read.ddp.powersgd_start_step);
  EXPECT_EQ(built.num_threads, env::default_int(env::kNumCpuThreads));
  EXPECT_EQ(built.cudnn_benchmark, read.cudnn_benchmark);
  EXPECT_EQ(built.deterministic, read.deterministic);
  EXPECT_EQ(built.profile_ops, read.profile_ops);
  EXPECT_EQ(built.record_shapes, read.record_shapes);

  const xlaunch::LoaderOptions lb, lr = xlaunch::LoaderOptions::from_env();
  EXPECT_EQ(lb.num_workers, lr.num_workers);
  EXPECT_EQ(lb.prefetch_factor, lr.prefetch_factor);
  EXPECT_EQ(lb.pin_memory, lr.pin_memory);
  EXPECT_EQ(lb.even_batches, lr.even_batches);

  const xlaunch::watch::Settings ws;
  EXPECT_EQ(ws.timeout_s, env::get_float(env::kTimeoutS));
  EXPECT_EQ(ws.debug, env::get_bool(env::kDebug));
}

TEST(Defaults, DefaultsParseAsTheirDeclaredType) {
  for (const env::Var* v : env::kAll) {
    switch (v->type) {
      case env::Type::Bool: EXPECT_NO_THROW(env::default_bool(*v)) << v->name; break;
      case env::Type::Int: EXPECT_NO_THROW(env::default_int(*v)) << v->name; break;
      case env::Type::Float: EXPECT_NO_THROW(env::default_float(*v)) << v->name; break;
      case env::Type::String: break;
    }
  }
}
