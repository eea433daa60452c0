-- hub_checks: one row per (run, check kind) of the Hub cache hits: how each hit was found
-- current.
--
-- reads: tables only
--
-- run_id  VARCHAR  the run
-- check   VARCHAR  etag | hash | none | offline (the hub record's check)
-- hits    BIGINT   cache hits checked this way
-- bytes   BIGINT   their bytes
SELECT run_id, "check", count(*) AS hits, TRY_CAST(sum(bytes) AS BIGINT) AS bytes
FROM hub GROUP BY ALL
