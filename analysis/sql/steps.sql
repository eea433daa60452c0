-- steps: one row per (run, step label): the step spans a program opened under that name
-- (`session.step("train", i)`, candle-graph's forward | backward | optimizer, or, recorded by
-- `ember record` without explicit steps, a top-level jitted function's name).
--
-- reads: spans
--
-- run_id          VARCHAR  the run
-- step            VARCHAR  the label as the program gave it
-- steps           BIGINT   step spans with that label (open ones included)
-- failed          BIGINT   of them, those that ended with status 'error'
-- open_steps      BIGINT   of them, those without an end (the process stopped inside)
-- first_index     BIGINT   the smallest index given to these steps (NULL: none given)
-- last_index      BIGINT   the largest index given to these steps (NULL: none given)
-- total_ns        BIGINT   the finished ones' summed duration
-- first_start_ns  BIGINT   when the first one started (ns since the run started): orders labels
SELECT
    run_id,
    start_attrs.step AS step,
    count(*) AS steps,
    count(*) FILTER (WHERE status = 'error') AS failed,
    count(*) FILTER (WHERE status = 'open') AS open_steps,
    min(start_attrs.index) AS first_index,
    max(start_attrs.index) AS last_index,
    CAST(coalesce(sum(duration_ns), 0) AS BIGINT) AS total_ns,
    min(start_ns) AS first_start_ns
FROM spans
WHERE span_kind = 'step'
GROUP BY run_id, start_attrs.step
