# Run by CTest (tests/install/CMakeLists.txt) with BUILD_DIR, OUTSIDE_SOURCE, SCRATCH and
# COMPILER_LAUNCHER set. Every step's output is shown, and the first failing step ends the test.

function(step what)
  message(STATUS "[install test] ${what}: ${ARGN}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  message("${out}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "[install test] ${what} failed (exit ${rc})")
  endif()
  set(step_output "${out}" PARENT_SCOPE)
endfunction()

function(expect_line output pattern)
  if(NOT output MATCHES "${pattern}")
    message(FATAL_ERROR "[install test] expected a line matching '${pattern}' in the output above")
  endif()
endfunction()

# A scratch directory that holds the prefix and a copy of the outside project, so nothing ties
# the project to xlaunch's source or build tree.
file(REMOVE_RECURSE ${SCRATCH})
set(prefix ${SCRATCH}/prefix)
file(COPY ${OUTSIDE_SOURCE}/ DESTINATION ${SCRATCH}/src)

step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f bin/xlaunch include/xlaunch/accelerator.h lib/cmake/xlaunch/xlaunchConfig.cmake)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "[install test] ${prefix}/${f} was not installed")
  endif()
endforeach()
file(GLOB libs ${prefix}/lib/libxlaunch.so*)
if(NOT libs)
  message(FATAL_ERROR "[install test] ${prefix}/lib/libxlaunch.so was not installed")
endif()
if(EXISTS ${prefix}/include/xlaunch/kernels)
  message(FATAL_ERROR "[install test] the kernels' private headers were installed")
endif()

# Only the headers a user includes are installed: what a training program includes, and under
# extend/ the interfaces that extending xlaunch (a transport, a communication hook) implements, and
# under rl/ the environment pool, the environment interface and the tensor environments, under augment/ the image
# augmentations' interface and transforms (augment.h gathers them). The
# Accelerator's own pieces (its options, the prepared handles, a checkpointed object) and the
# settings table that env_vars.h and accelerator_options.h are made from (with the ZeRO stages' table
# it checks ddp.zero_stage by, and the wrap policy's it checks fsdp.wrap by) are public too, and
# fully_shard.h, which declares a stage-3 unit. The
# runtime's internals (communicator implementations, the bucket plan, PowerSGD, the checkpoint
# format, the MPI/CUDA check macros) are not.
set(user_headers accelerator.h accelerator_options.h checkpoint_object.h prepared.h settings.h autocast.h comm_hooks.h dataset.h env_vars.h error.h fashion_mnist.h
    grad_scaler.h lion.h loader.h lr_scheduler.h metrics.h mixed_precision.h place.h preemption.h process_state.h reducer.h
    safetensors.h sampler.h object_codec.h split.h stream_dataset.h sync_batchnorm.h tracking.h
    extend/comm_hook.h extend/communicator.h rl/env.h rl/env_pool.h rl/tensor_env.h rng.h augment.h augment/args.h augment/colour.h
    augment/geometric.h augment/sequential.h augment/transform.h zero_stages.h wrap_policy.h fully_shard.h)
file(GLOB_RECURSE installed RELATIVE ${prefix}/include/xlaunch ${prefix}/include/xlaunch/*)
list(SORT installed)
list(SORT user_headers)
if(NOT installed STREQUAL user_headers)
  message(FATAL_ERROR "[install test] installed headers: ${installed}; expected exactly: ${user_headers}")
endif()

# Every installed header, included by the outside program: each must compile against the
# package alone (no header may reach for one that was not installed).
file(GLOB headers RELATIVE ${prefix}/include ${prefix}/include/xlaunch/*.h ${prefix}/include/xlaunch/extend/*.h
     ${prefix}/include/xlaunch/rl/*.h ${prefix}/include/xlaunch/augment/*.h)
set(includes "")
foreach(h IN LISTS headers)
  string(APPEND includes "#include \"${h}\"\n")
endforeach()
file(WRITE ${SCRATCH}/src/installed_headers.h "#pragma once\n${includes}")

set(launcher_arg "")
if(COMPILER_LAUNCHER)
  set(launcher_arg -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER} -DCMAKE_C_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
endif()
step("configure the outside project" ${CMAKE_COMMAND} -S ${SCRATCH}/src -B ${SCRATCH}/build
     -DCMAKE_PREFIX_PATH=${prefix} ${launcher_arg})
step("build the outside project" ${CMAKE_COMMAND} --build ${SCRATCH}/build -j 2)

# No config file of the user's: the launcher's built-in defaults; --cpu whatever GPUs exist.
set(ENV{XDG_CONFIG_HOME} ${SCRATCH}/config)
unset(ENV{XLAUNCH_CONFIG_FILE})
set(ENV{TMPDIR} ${SCRATCH})

step("run it by hand (rank 0 of 1)" ${SCRATCH}/build/outside)
expect_line("${step_output}" "outside: rank 0 of 1 weight -?0 expected -?0: ok")

step("run it under the installed launcher" ${prefix}/bin/xlaunch run -n 2 --cpu ${SCRATCH}/build/outside)
expect_line("${step_output}" "outside: rank 0 of 2 weight -0.5 expected -0.5: ok")
expect_line("${step_output}" "outside: rank 1 of 2 weight -0.5 expected -0.5: ok")
message(STATUS "[install test] passed")
