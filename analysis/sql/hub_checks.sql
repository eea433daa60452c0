-- hub_checks: one row per (run, check kind) of the Hub cache hits: how each hit was found
-- current.
--
-- run_id
-- check         etag | hash | none | offline (the hub record's check)
-- hits          cache hits checked this way
-- bytes         their bytes
SELECT run_id, "check", count(*) AS hits, TRY_CAST(sum(bytes) AS BIGINT) AS bytes
FROM hub GROUP BY ALL
