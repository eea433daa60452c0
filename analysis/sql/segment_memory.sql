-- segment_memory: one row per compiled segment that reported its static memory (XLA's
-- memory_analysis of the executable).
--
-- run_id, position
-- key           the segment's cache key
-- start_ns      when it was compiled (ns since the run started)
-- argument_bytes, output_bytes, temp_bytes   what one run of it needs
-- code_bytes    the generated code
-- compile_ns    the compile's time
SELECT run_id, position, start_attrs.key AS key, start_ns,
    end_attrs.memory.argument_bytes AS argument_bytes,
    end_attrs.memory.output_bytes AS output_bytes,
    end_attrs.memory.temp_bytes AS temp_bytes,
    end_attrs.memory.generated_code_bytes AS code_bytes,
    duration_ns AS compile_ns
FROM spans
WHERE span_kind = 'segment_compile' AND end_attrs.memory IS NOT NULL
