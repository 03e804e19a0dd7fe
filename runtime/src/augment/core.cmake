# The core (transform.h, args.h, sequential.h): the draw protocol, the registry, reading Kornia's
# keyword arguments, and the sequence.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/transform.cpp ${CMAKE_CURRENT_LIST_DIR}/registry.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/args.cpp ${CMAKE_CURRENT_LIST_DIR}/sequential.cpp)
