# The environments (env.h): Space, Rng, the registry, and Gymnasium's classic-control set.
set(_xlaunch_rl_classic_control
    ${CMAKE_CURRENT_LIST_DIR}/cartpole.cpp ${CMAKE_CURRENT_LIST_DIR}/acrobot.cpp
    ${CMAKE_CURRENT_LIST_DIR}/mountain_car.cpp ${CMAKE_CURRENT_LIST_DIR}/mountain_car_continuous.cpp
    ${CMAKE_CURRENT_LIST_DIR}/pendulum.cpp)
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/env.cpp ${_xlaunch_rl_classic_control})
# None of them needs torch: they skip the runtime's precompiled torch header.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/env.cpp ${_xlaunch_rl_classic_control}
                            TARGET_DIRECTORY xlaunch_runtime PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
# Each operation rounded on its own, as numpy rounds it: no fused multiply-add on targets that have
# one (-march=native), or the trajectories leave Gymnasium's (classic_control.h).
set_source_files_properties(${_xlaunch_rl_classic_control} TARGET_DIRECTORY xlaunch_runtime
                            PROPERTIES COMPILE_OPTIONS -ffp-contract=off)
