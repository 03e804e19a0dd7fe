// xlaunch_merge_weights: the program behind `xlaunch merge-weights` (merge_weights.h), which the
// launcher execs with the words given after `merge-weights`. Exit codes as the launcher's: 0 done,
// 2 a mistake to fix (the message says which), 1 anything else.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "merge_weights.h"
#include "xlaunch/error.h"
#include "xlaunch/safetensors.h"

int main(int argc, char** argv) {
  xlaunch::merge::MergeOptions o;
  std::string max_shard_size = "10GB";
  CLI::App app{"Write the full model(s) of an xlaunch checkpoint as safetensors (as `accelerate merge-weights`)",
               "xlaunch merge-weights"};
  app.add_option("CHECKPOINT", o.checkpoint, "A checkpoint directory save_state wrote")->required();
  app.add_option("OUT", o.out, "Output directory (created when missing)")->required();
  app.add_flag("--overwrite", o.overwrite, "Replace the model files OUT already holds");
  app.add_option("--max_shard_size", max_shard_size,
                 "Split a model larger than this into shards with an index (e.g. 5GB, 500MiB)")
      ->capture_default_str();
  app.footer(
      "Writes model 0 as OUT/model.safetensors and model i as OUT/model_<i>.safetensors (sharded:\n"
      "model-0000k-of-0000N.safetensors + model.safetensors.index.json, likewise model_<i>-...), from the\n"
      "checkpoint's rank0/model_<i>.pt, after verifying it against its MANIFEST. Files are written under\n"
      "temporary names and renamed into place: none is ever half-written. See docs/checkpointing.md.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    try {
      o.max_shard_bytes = xlaunch::parse_size(max_shard_size);
    } catch (const xlaunch::UsageError& e) {
      throw xlaunch::UsageError(std::string("merge-weights: --max_shard_size: ") + e.what());
    }
    xlaunch::merge::merge_weights(o, std::cerr);
  } catch (const xlaunch::UsageError& e) {
    std::fprintf(stderr, "xlaunch: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "xlaunch: error: merge-weights: %s\n", e.what());
    return 1;
  }
  return 0;
}
