// The TensorBoard backend (make_tensorboard_backend in backends.h): what its event files are
// called and what they hold, as pure functions; the backend itself is in tensorboard_backend.cpp.
//
// One file per process: events.out.tfevents.<seconds>.<host>.<pid>.<n> in the run directory, a
// sequence of TFRecord-framed Event messages (record_writer.h, proto/tb_event.proto):
//   1. file_version "brain.Event:2" (first begin() only);
//   2. a SessionLog START at RunStart::first_step (every begin()): TensorBoard's reader
//      (EventAccumulator) then drops the records read before it with that step or a later one,
//      the orphans of a resumed run. Its fast loader (RustBoard, the default of `tensorboard`)
//      ignores START and drops them per tag instead: a tag's first record after the resumption
//      drops that tag's records at its step or later, so a tag logged at the same steps as
//      before (every step, or every N steps counted from 0) loses all its orphans, and a tag
//      never logged again keeps them;
//   3. the hyperparameters at first_step (first begin() only, when there are any): a markdown table
//      for the text plugin (tag "hparams/text_summary") and the hparams plugin's
//      session_start_info (tag "_hparams_/session_start_info"), which puts the run in the HPARAMS
//      dashboard;
//   4. one Event per scalars() call, one Summary value per scalar (float32, NaN and infinities as
//      they are), the first of each tag with the "scalars" plugin's metadata; one per histogram().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "xlaunch/tracking.h"

namespace xlaunch::track {

// events.out.tfevents.<seconds, 10 digits>.<host>.<pid>.<n>
std::string event_file_name(int64_t seconds, const std::string& host, long pid, int n);

// The <seconds> of a new event file: `now`, or one more than the newest among `names` (the
// directory's entries) when that is not earlier. TensorBoard reads a run's files in the order of
// their names, and a resumed process's file has to come after the files it resumes (its START
// drops only what was read before it), even when both were made within one second.
int64_t event_file_seconds(int64_t now, const std::vector<std::string>& names);

// The hyperparameters as the text plugin shows them: a markdown table "| name | value |", one row
// per name in the map's order, values as HParam::to_string writes them ('|' escaped).
std::string hparams_markdown(const HParams& config);

}  // namespace xlaunch::track
