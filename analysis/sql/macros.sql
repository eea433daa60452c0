-- Macros the views share (created before the views).
--
-- ember_shapes_text(shapes): the argument shapes of a segment as text,
--   'input_ids[1,17]:int64, mask[1,17]:bool'; a sequence argument as 'name{[2]:f32,[3]:f32}'.
-- ember_statics_text(statics): the static values, 'perm=[0,2,1], axis=1'.
-- ember_key(key, shapes, statics): the cache key as recorded, or one built from the shapes
--   and static values when the runtime did not record one.
-- ember_at(wall_time_ns, ts_ns): the absolute time (TIMESTAMP_NS, UTC) of a run's ts_ns; NULL
--   when the sum does not fit a timestamp (the schema bounds both, so that only a database
--   written before it can hold such a run: it must not break the views over every run).
-- ember_hub_parts(source): {repo, path} of a Hub source as the runtime writes it
--   (runtime/hub.py hub_source): 'hf://owner/name/path/in/repo', or with a revision
--   'hf://<id>@<revision>/path/in/repo', which a one-part id ('hf://gpt2@main/onnx/model.onnx')
--   always has: the '@' ends the id. path is '' for the repository itself.
CREATE OR REPLACE MACRO ember_shapes_text(shapes) AS
    array_to_string(
        list_transform(
            shapes,
            lambda _arg: _arg.name
                || coalesce('[' || array_to_string(_arg.shape, ',') || ']', '')
                || coalesce(':' || _arg.dtype, '')
                || coalesce('{' || array_to_string(list_transform(_arg.sequence,
                       lambda _seq: '[' || array_to_string(_seq.shape, ',') || ']:' || _seq.dtype), ',')
                   || '}', '')
        ),
        ', '
    );
CREATE OR REPLACE MACRO ember_statics_text(statics) AS
    array_to_string(list_transform(statics, lambda _sv: _sv.name || '=' || CAST(_sv.value AS VARCHAR)), ', ');
CREATE OR REPLACE MACRO ember_key(key, shapes, statics) AS
    coalesce(key, ember_shapes_text(shapes)
        || CASE WHEN len(coalesce(statics, [])) > 0 THEN ' | ' || ember_statics_text(statics) ELSE '' END);
CREATE OR REPLACE MACRO ember_at(wall_time_ns, ts_ns) AS
    make_timestamp_ns(TRY_CAST(CAST(wall_time_ns AS DECIMAL(38, 0)) + ts_ns AS BIGINT));
CREATE OR REPLACE MACRO ember_hub_parts(source) AS
    CASE WHEN regexp_matches(source, '^hf://[^/@]+(/[^/@]+)?@')
        THEN regexp_extract(source,
            '^hf://([^/@]+(?:/[^/@]+)?)@(?:refs/pr/[0-9]+|refs/convert/\w+|[^/]*)(?:/(.+))?$',
            ['repo', 'path'])
        ELSE regexp_extract(source, '^hf://([^/]+/[^/]+)(?:/(.+))?$', ['repo', 'path'])
    END;
