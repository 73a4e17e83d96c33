package io.kafkafast.spark;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SQLContext;
import org.apache.spark.sql.SaveMode;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.sources.BaseRelation;
import org.apache.spark.sql.sources.CreatableRelationProvider;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import scala.jdk.javaapi.CollectionConverters;

/**
 * Format "kafkafast" when this jar is on the classpath: the Python data source of the same name
 * (pyspark_kafkafast), plus the batch save modes of Spark's Kafka sink.
 *
 * <p>Spark's DataFrameWriter refuses every save mode but Append and Overwrite for a table that
 * supports BATCH_WRITE, which a Python data source's table always does, before the source is
 * asked. Spark prefers a JVM DataSourceRegister over a Python data source of the same name
 * (DataSource.lookupDataSource, SPARK-50426), and a TableProvider whose table lacks BATCH_WRITE
 * but which is a CreatableRelationProvider has its batch writes sent to createRelation with the
 * save mode. So this provider hands reads, streaming reads and streaming writes to the Python
 * source's own table, and takes batch writes: ErrorIfExists (the default) and Append append, as
 * with Spark's Kafka sink, through the Python writer; Overwrite and Ignore are refused.
 */
public class KafkafastProvider implements TableProvider, DataSourceRegister, CreatableRelationProvider {
  static final String NAME = "kafkafast";
  /** Spark's TableProvider for Python data sources (the one DataSource.lookupDataSource returns). */
  static final String PYTHON_PROVIDER = "org.apache.spark.sql.execution.datasources.v2.python.PythonDataSourceV2";
  /** Set only by createRelation on its own append: that write goes to the Python table's BATCH_WRITE. */
  static final String APPEND_OPTION = "__kafkafast_batch_append";

  private TableProvider python;

  @Override
  public String shortName() {
    return NAME;
  }

  /** The Python source's provider; one per instance, as Spark makes one per lookup. */
  private TableProvider python() {
    if (python == null) {
      try {
        Class<?> cls = Class.forName(PYTHON_PROVIDER, true, KafkafastProvider.class.getClassLoader());
        Object provider = cls.getDeclaredConstructor().newInstance();
        cls.getMethod("setShortName", String.class).invoke(provider, NAME);
        python = (TableProvider) provider;
      } catch (ReflectiveOperationException | ClassCastException e) {
        throw new IllegalStateException("format kafkafast: this Spark has no " + PYTHON_PROVIDER
            + " with setShortName (Spark 4.0 or newer is needed); " + e, e);
      }
    }
    return python;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return python().inferSchema(options);
  }

  @Override
  public Transform[] inferPartitioning(CaseInsensitiveStringMap options) {
    return python().inferPartitioning(options);
  }

  @Override
  public boolean supportsExternalMetadata() {
    return python().supportsExternalMetadata();
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    boolean batchWrite = false;
    for (Map.Entry<String, String> e : properties.entrySet()) {
      if (e.getKey().equalsIgnoreCase(APPEND_OPTION)) {
        batchWrite = "true".equals(e.getValue());
      }
    }
    return new KafkafastTable(python().getTable(schema, partitioning, properties), batchWrite);
  }

  @Override
  public BaseRelation createRelation(SQLContext sqlContext, SaveMode mode,
                                     scala.collection.immutable.Map<String, String> parameters,
                                     Dataset<Row> data) {
    if (mode == SaveMode.Overwrite || mode == SaveMode.Ignore) {
      throw new IllegalArgumentException("Save mode " + mode + " not allowed for kafkafast. Allowed save modes are "
          + SaveMode.Append + " and " + SaveMode.ErrorIfExists + " (default).");
    }
    Map<String, String> options = new HashMap<>(CollectionConverters.asJava(parameters));
    options.put(APPEND_OPTION, "true");
    data.write().format(NAME).options(options).mode(SaveMode.Append).save();
    StructType schema = data.schema();
    return new BaseRelation() {
      @Override
      public SQLContext sqlContext() {
        return sqlContext;
      }

      @Override
      public StructType schema() {
        return schema;
      }
    };
  }

  /** The Python source's table; BATCH_WRITE only for createRelation's own append. */
  static final class KafkafastTable implements Table, SupportsRead, SupportsWrite {
    private final Table python;
    private final boolean batchWrite;

    KafkafastTable(Table python, boolean batchWrite) {
      this.python = python;
      this.batchWrite = batchWrite;
    }

    @Override
    public String name() {
      return python.name();
    }

    @Override
    public StructType schema() {
      return python.schema();
    }

    @Override
    public Transform[] partitioning() {
      return python.partitioning();
    }

    @Override
    public Map<String, String> properties() {
      return python.properties();
    }

    @Override
    public Set<TableCapability> capabilities() {
      Set<TableCapability> caps = EnumSet.noneOf(TableCapability.class);
      caps.addAll(python.capabilities());
      if (!batchWrite) {
        caps.remove(TableCapability.BATCH_WRITE);
      }
      return caps;
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return ((SupportsRead) python).newScanBuilder(options);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      return ((SupportsWrite) python).newWriteBuilder(withoutAppendOption(info));
    }
  }

  /** The write's options as the user gave them, for the Python writer's option check. */
  static LogicalWriteInfo withoutAppendOption(LogicalWriteInfo info) {
    Map<String, String> kept = new HashMap<>();
    for (Map.Entry<String, String> e : info.options().asCaseSensitiveMap().entrySet()) {
      if (!e.getKey().equalsIgnoreCase(APPEND_OPTION)) {
        kept.put(e.getKey(), e.getValue());
      }
    }
    CaseInsensitiveStringMap options = new CaseInsensitiveStringMap(kept);
    return new LogicalWriteInfo() {
      @Override
      public CaseInsensitiveStringMap options() {
        return options;
      }

      @Override
      public String queryId() {
        return info.queryId();
      }

      @Override
      public StructType schema() {
        return info.schema();
      }

      @Override
      public Optional<StructType> rowIdSchema() {
        return info.rowIdSchema();
      }

      @Override
      public Optional<StructType> metadataSchema() {
        return info.metadataSchema();
      }
    };
  }
}
