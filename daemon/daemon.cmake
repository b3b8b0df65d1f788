# traintld and the libraries only it uses.
add_library(traintl_head STATIC
  head/command_log.cc
  head/checkpoint_merge.cc
  head/checkpoint_committer.cc
  head/checkpoint_files.cc
  head/deletion_check.cc
  head/attempt_tracker.cc
  head/node_client.cc
  head/job_manager.cc
  head/job_manager_nodes.cc
  head/job_queue.cc
  head/launch_plans.cc
  head/node_registry.cc
  head/http_remote_nodes.cc
  head/tune_controller.cc
  head/tune_results.cc
  head/rank_metrics.cc
  head/rank_progress.cc
  node/head_link.cc
  api/views.cc
  api/api_routes.cc
  api/log_stream.cc
  api/head_forwarder.cc
  api/internal_routes.cc
  api/tune_routes.cc
  api/metrics_route.cc
  api/dashboard_routes.cc
  metrics/job_metric_series.cc
  metrics/prometheus_text.cc
  daemon_config.cc
  daemon.cc)
target_include_directories(traintl_head PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(traintl_head PUBLIC traintl_state traintl_scheduler traintl_node
                      traintl_consensus traintl_http traintl_proto traintl_systemd
                      traintl_tune_sched Boost::program_options)
target_compile_definitions(traintl_head PUBLIC TRAINTL_VERSION="${PROJECT_VERSION}")

add_executable(traintld main.cc)
target_link_libraries(traintld PRIVATE traintl_head traintl_systemd)

# The web dashboard's files, built into traintld (daemon/dashboard/embedded_files.h).
set(_dashboard_files
  ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/assets/index.html
  ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/assets/app.js
  ${CMAKE_CURRENT_SOURCE_DIR}/dashboard/assets/app.css
  ${PROJECT_SOURCE_DIR}/third_party/uplot/uPlot.iife.min.js
  ${PROJECT_SOURCE_DIR}/third_party/uplot/uPlot.min.css)
string(JOIN "|" _dashboard_files_arg ${_dashboard_files})
add_custom_command(
  OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/dashboard_files.cc
  COMMAND ${CMAKE_COMMAND} -DOUTPUT=${CMAKE_CURRENT_BINARY_DIR}/dashboard_files.cc
          "-DFILES=${_dashboard_files_arg}" -P ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
  DEPENDS ${_dashboard_files} ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
  COMMENT "Embedding the dashboard's files"
  VERBATIM)
add_library(traintl_dashboard_files STATIC ${CMAKE_CURRENT_BINARY_DIR}/dashboard_files.cc)
target_include_directories(traintl_dashboard_files PUBLIC ${PROJECT_SOURCE_DIR})
target_link_libraries(traintl_head PUBLIC traintl_dashboard_files)
