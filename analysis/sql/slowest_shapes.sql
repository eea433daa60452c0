-- slowest_shapes: one row per run with calls: its input shapes with the highest p99
-- (a row of call_latency).
--
-- run_id, source, shapes_text, calls, errors, p50_ns, p90_ns, p99_ns, mean_ns, max_ns,
-- min_ns, first_ns, compiling_calls, p50_warm_ns, total_ns   as in call_latency
SELECT * FROM call_latency
QUALIFY row_number() OVER (PARTITION BY run_id ORDER BY p99_ns DESC, shapes_text) = 1
