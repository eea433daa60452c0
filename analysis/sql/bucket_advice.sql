-- bucket_advice: one row per (run, source, position, input, dim) where padding the caller's
-- input to power-of-two buckets saves compiles (shape_buckets, for inputs a caller can pad:
-- a segment after a graph break gets tensors the model made).
--
-- reads: compiles, shape_buckets
--
-- run_id                  VARCHAR    the run
-- source                  VARCHAR    the model source (its path or Hub address)
-- position                BIGINT     the segment position (index in the sorted graph)
-- arg                     VARCHAR    the input to pad: a segment argument the caller passes
--                                    ('input_ids')
-- dim                     BIGINT     the dimension of it whose size varies (0-based)
-- distinct_sizes          BIGINT     sizes compiled for this dimension (as in `shape_buckets`)
-- min_size                BIGINT     its smallest size
-- max_size                BIGINT     its largest size
-- sizes                   BIGINT[]   its sizes, ascending
-- compiles                BIGINT     compiles at this position (all their shapes)
-- pow2_buckets            BIGINT     distinct sizes after padding up to the next power of two
-- pow2_sizes              BIGINT[]   those power-of-two bucket sizes, ascending
-- saved_compiles          BIGINT     distinct_sizes - pow2_buckets, always above 0 here: the
--                                    compiles padding would save (at least, with a cache big enough
--                                    for the buckets)
-- multiple_of_64_buckets  BIGINT     distinct sizes after padding up to a multiple of 64 instead
-- varying_dims            BIGINT     dimensions that vary at this position
-- varying                 VARCHAR[]  those dimensions, 'x dim 1'
-- mean_compile_ns         DOUBLE     the mean compile time at this position
WITH v AS (
    -- grouped, not a window: Spark has no list() OVER (...) (ember views --dialect spark)
    SELECT run_id, source, position, count(*) AS varying_dims,
        list(arg || ' dim ' || dim ORDER BY arg, dim) AS varying
    FROM shape_buckets GROUP BY ALL
),
b AS (
    SELECT s.*, v.varying_dims, v.varying
    FROM shape_buckets AS s JOIN v ON v.run_id = s.run_id
        AND v.source IS NOT DISTINCT FROM s.source AND v.position IS NOT DISTINCT FROM s.position
),
ns AS (
    SELECT run_id, source, position, avg(compile_ns) AS mean_compile_ns
    FROM compiles WHERE position IS NOT NULL GROUP BY ALL
),
inputs AS (
    -- the input names of each distinct list of them (unnesting every call's shapes is
    -- 100x slower on a long run)
    SELECT DISTINCT run_id, source, unnest(names) AS arg FROM (
        SELECT DISTINCT run_id, attrs.source AS source,
            list_transform(attrs.shapes, lambda a: a.name) AS names
        FROM span_start WHERE span_kind = 'call'
    )
),
known AS (SELECT DISTINCT run_id, source FROM inputs)
SELECT b.*, ns.mean_compile_ns FROM b LEFT JOIN ns ON ns.run_id = b.run_id
    AND ns.source IS NOT DISTINCT FROM b.source AND ns.position = b.position
WHERE b.saved_compiles > 0 AND (
    NOT EXISTS (SELECT 1 FROM known k WHERE k.run_id = b.run_id
        AND k.source IS NOT DISTINCT FROM b.source)
    OR EXISTS (SELECT 1 FROM inputs i WHERE i.run_id = b.run_id
        AND i.source IS NOT DISTINCT FROM b.source AND i.arg = b.arg))
