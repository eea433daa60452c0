-- call_errors: one row per run and kind of span that raised: its calls, or the model's
-- load or compile (a run whose model failed to load or compile has no calls to fail).
--
-- reads: spans
--
-- run_id     VARCHAR    the run
-- span_kind  VARCHAR    call | load | compile
-- errors     BIGINT     spans of that kind that failed
-- reasons    VARCHAR[]  the distinct reasons (error reason, else kind)
SELECT run_id, span_kind, count(*) AS errors,
    list(DISTINCT coalesce(error_reason, error_kind, 'error')) AS reasons
FROM spans WHERE span_kind IN ('call', 'load', 'compile') AND status = 'error'
GROUP BY ALL
