-- segment_memory: one row per compiled segment that reported its static memory (XLA's
-- memory_analysis of the executable).
--
-- reads: spans
--
-- run_id          VARCHAR  the run
-- position        BIGINT   the segment position (index in the sorted graph)
-- key             VARCHAR  the segment's cache key
-- start_ns        BIGINT   when it was compiled (ns since the run started)
-- argument_bytes  BIGINT   bytes of its arguments (XLA's argument_bytes; NULL if not reported)
-- output_bytes    BIGINT   bytes of its outputs (XLA's output_bytes; NULL if not reported)
-- temp_bytes      BIGINT   scratch bytes one run of it uses (XLA's temp_bytes; NULL if not
--                          reported)
-- code_bytes      BIGINT   the generated code
-- compile_ns      BIGINT   the compile's time
SELECT run_id, position, start_attrs.key AS key, start_ns,
    end_attrs.memory.argument_bytes AS argument_bytes,
    end_attrs.memory.output_bytes AS output_bytes,
    end_attrs.memory.temp_bytes AS temp_bytes,
    end_attrs.memory.generated_code_bytes AS code_bytes,
    duration_ns AS compile_ns
FROM spans
WHERE span_kind = 'segment_compile' AND end_attrs.memory IS NOT NULL
