"""The team lake: one Delta table per record table, written with ``deltalake``.

The facade of the lake family (import from here, not from its modules): ``table`` (the
tables, partitions and stored columns), ``commit`` (a batch's rows visible in one commit,
once per file content, also when ingesters race or are killed), ``write`` (staged rows to
Arrow), ``ingest`` (the driver of ``ember ingest --lake``), ``read`` (DuckDB over a committed
snapshot, with the same views as the DuckDB file), ``admin`` (``ember lake
optimize/vacuum/check/upgrade``) and ``spark`` (the Spark ingest and Spark SQL views).
"""

from .admin import check as check
from .admin import optimize as optimize
from .admin import upgrade as upgrade
from .admin import vacuum as vacuum
from .ingest import ingest_lake as ingest_lake
from .read import attach_lake as attach_lake
from .read import connect_lake as connect_lake
from .spark.job import ingest_spark as ingest_spark
from .spark.sql import HAND_WRITTEN as HAND_WRITTEN
from .spark.sql import spark_tables as spark_tables
from .spark.sql import spark_views as spark_views
from .table import LAKE_TABLES as LAKE_TABLES
from .table import LakeError as LakeError
from .table import is_lake as is_lake
from .table import is_old_lake as is_old_lake
