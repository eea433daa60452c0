-- _call_errors: one row per run whose calls raised.
--
-- run_id
-- errors        failed calls
-- reasons       the distinct reasons (error reason, else kind)
SELECT run_id, count(*) AS errors,
    list(DISTINCT coalesce(error_reason, error_kind, 'error')) AS reasons
FROM spans WHERE span_kind = 'call' AND status = 'error'
GROUP BY ALL
