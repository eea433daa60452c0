-- rejected_files: one row per (trace file, run): the lines ingest rejected.
--
-- reads: tables only
--
-- file          VARCHAR  the trace file (absolute path)
-- run_id        VARCHAR  the run
-- lines         BIGINT   rejected lines
-- first_line    BIGINT   the first of them (1-based)
-- first_reason  VARCHAR  why it was rejected
SELECT file, run_id, count(*) AS lines, min(line) AS first_line,
    arg_min(reason, line) AS first_reason
FROM rejected_lines GROUP BY file, run_id
