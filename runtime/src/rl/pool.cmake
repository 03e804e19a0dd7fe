# The environment pool (xlaunch/rl/env_pool.h): the pool (its calls; its threads and stepping), its
# plan (threads, chunks, batch layout), the action checks, the batch slots, and the doorbell its
# threads wake each other with.
target_sources(xlaunch_runtime PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/env_pool.cpp ${CMAKE_CURRENT_LIST_DIR}/pool_stepping.cpp ${CMAKE_CURRENT_LIST_DIR}/pool_plan.cpp
  ${CMAKE_CURRENT_LIST_DIR}/pool_actions.cpp ${CMAKE_CURRENT_LIST_DIR}/pool_batch.cpp
  ${CMAKE_CURRENT_LIST_DIR}/doorbell.cpp)
