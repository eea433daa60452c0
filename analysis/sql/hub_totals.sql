-- hub_totals: one row per run that used the Hub: its files and metadata requests, summed
-- over hub_files (the Hub page's headline numbers).
--
-- reads: hub_files
--
-- run_id      VARCHAR  the run
-- files       BIGINT   Hub files the run used (hub_files rows with what = 'file')
-- bytes       BIGINT   their sizes, summed
-- hits        BIGINT   times one of them came from the local cache, current
-- downloads   BIGINT   times one of them was downloaded
-- info_saved  BIGINT   metadata requests answered from the saved copy (the Hub was unreachable)
-- failures    BIGINT   downloads or metadata requests that ended in an error
SELECT run_id,
    count(*) FILTER (WHERE what = 'file') AS files,
    TRY_CAST(coalesce(sum(bytes) FILTER (WHERE what = 'file'), 0) AS BIGINT) AS bytes,
    TRY_CAST(coalesce(sum(hits) FILTER (WHERE what = 'file'), 0) AS BIGINT) AS hits,
    TRY_CAST(coalesce(sum(downloads) FILTER (WHERE what = 'file'), 0) AS BIGINT) AS downloads,
    TRY_CAST(coalesce(sum(info_saved) FILTER (WHERE what = 'repo_info'), 0) AS BIGINT)
        AS info_saved,
    TRY_CAST(coalesce(sum(failures), 0) AS BIGINT) AS failures
FROM hub_files
GROUP BY run_id
