-- hub_files: one row per Hub file (or repository metadata) a run used, per revision.
--
-- reads: spans
--
-- run_id        VARCHAR       the run
-- source        VARCHAR       'hf://owner/repo/path/in/repo' (a file) or 'hf://owner/repo'
--                             (metadata); a one-part id carries its revision:
--                             'hf://gpt2@main/onnx/model.onnx'
-- repo          VARCHAR       'owner/repo' (or 'gpt2')
-- path          VARCHAR       the path in the repository; NULL for repository metadata
-- what          VARCHAR       file | repo_info
-- revision      VARCHAR       the revision asked for ('main', a tag, a commit)
-- hits          BIGINT        times the file came from the local cache, current
-- downloads     BIGINT        times it was downloaded (hub_download spans that ended ok)
-- failures      BIGINT        downloads or info requests that ended in an error
-- info_fetched  BIGINT        repo_info: metadata requests the Hub answered (0 for a file)
-- info_saved    BIGINT        repo_info: metadata requests served from Ember's saved copy because
--                             the Hub failed or was unreachable (0 for a file)
-- bytes         BIGINT        the file's size (largest seen)
-- download_ns   BIGINT        time spent downloading it
-- checks        VARCHAR[]     how the cache found the file current (etag | hash | none | offline)
-- first_ts_ns   BIGINT        when the run first asked for it (ns since the run started)
-- first_at      TIMESTAMP_NS  first_ts_ns as an absolute time (UTC)
WITH ev AS (
    SELECT run_id, source, revision, 'hit' AS action, bytes, NULL::BIGINT AS duration_ns,
        "check", ts_ns, 'ok' AS status, NULL AS result
    FROM hub
    UNION ALL
    SELECT run_id, source, start_attrs.revision, 'download', end_attrs.bytes, duration_ns,
        NULL, start_ns, status, NULL
    FROM spans WHERE span_kind = 'hub_download'
    UNION ALL
    SELECT run_id, source, start_attrs.revision, 'info', NULL, duration_ns, NULL, start_ns,
        status, end_attrs.result
    FROM spans WHERE span_kind = 'hub_info'
)
SELECT
    ev.run_id,
    ev.source,
    nullif(ember_hub_parts(ev.source).repo, '') AS repo,
    nullif(ember_hub_parts(ev.source).path, '') AS path,
    CASE WHEN bool_or(ev.action = 'info') THEN 'repo_info' ELSE 'file' END AS what,
    ev.revision,
    count(*) FILTER (WHERE ev.action = 'hit') AS hits,
    count(*) FILTER (WHERE ev.action = 'download' AND ev.status = 'ok') AS downloads,
    count(*) FILTER (WHERE ev.status = 'error') AS failures,
    count(*) FILTER (WHERE ev.result = 'fetched') AS info_fetched,
    count(*) FILTER (WHERE ev.result = 'saved') AS info_saved,
    max(ev.bytes) AS bytes,
    CAST(sum(ev.duration_ns) FILTER (WHERE ev.action = 'download') AS BIGINT) AS download_ns,
    list(DISTINCT ev."check") FILTER (WHERE ev."check" IS NOT NULL) AS checks,
    min(ev.ts_ns) AS first_ts_ns,
    ember_at(any_value(r.wall_time_ns), min(ev.ts_ns)) AS first_at
FROM ev
LEFT JOIN runs r ON r.run_id = ev.run_id
GROUP BY ev.run_id, ev.source, ev.revision
