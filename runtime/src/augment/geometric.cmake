# The geometric transforms (geometric.h) and their one resampling step (warp.h).
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/warp.cpp ${CMAKE_CURRENT_LIST_DIR}/affine.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/perspective.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/resized_crop.cpp ${CMAKE_CURRENT_LIST_DIR}/flip.cpp)
