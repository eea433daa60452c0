-- rejected_files: one row per (trace file, run): the lines ingest rejected.
--
-- file, run_id
-- lines         rejected lines
-- first_line    the first of them (1-based)
-- first_reason  why it was rejected
SELECT file, run_id, count(*) AS lines, min(line) AS first_line,
    arg_min(reason, line) AS first_reason
FROM rejected_lines GROUP BY file, run_id
