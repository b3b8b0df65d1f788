# traintld and the libraries only it uses.
add_library(traintl_head STATIC
  head/command_log.cc
  head/checkpoint_merge.cc
  head/checkpoint_committer.cc
  head/checkpoint_files.cc
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
