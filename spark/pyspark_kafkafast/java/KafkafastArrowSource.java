package io.kafkafast.spark;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.BufferedInputStream;
import java.io.BufferedReader;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.Serializable;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.Channels;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowStreamReader;
import org.apache.spark.SparkEnv;
import org.apache.spark.SparkFiles;
import org.apache.spark.TaskContext;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Batch;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.SupportsPushDownRequiredColumns;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;
import org.apache.spark.sql.vectorized.ArrowColumnVector;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * Batch reads of kafkafast (or any Kafka) topics as Arrow column batches: format "kafkafast_arrow".
 * Same schema and options as the Python "kafkafast" source; planning and the records come from
 * pyspark_kafkafast's own code in a Python process per JVM (pyspark_kafkafast/arrow_pipe.py); this
 * side prunes columns and hands Spark ColumnarBatches of ArrowColumnVectors.
 */
public class KafkafastArrowSource implements TableProvider, DataSourceRegister {
  static final ObjectMapper JSON = new ObjectMapper();

  @Override
  public String shortName() {
    return "kafkafast_arrow";
  }

  static boolean includeHeaders(Map<String, String> options) {
    for (Map.Entry<String, String> e : options.entrySet()) {
      if (e.getKey().equalsIgnoreCase("includeHeaders")) {
        return e.getValue().trim().equalsIgnoreCase("true");
      }
    }
    return false;
  }

  static StructType schema(boolean headers) {
    StructType s = new StructType()
        .add("key", DataTypes.BinaryType).add("value", DataTypes.BinaryType)
        .add("topic", DataTypes.StringType).add("partition", DataTypes.IntegerType)
        .add("offset", DataTypes.LongType).add("timestamp", DataTypes.TimestampType)
        .add("timestampType", DataTypes.IntegerType);
    if (headers) {
      s = s.add("headers", DataTypes.createArrayType(
          new StructType().add("key", DataTypes.StringType).add("value", DataTypes.BinaryType)));
    }
    return s;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return schema(includeHeaders(options.asCaseSensitiveMap()));
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new ArrowTable(schema);
  }

  static final class ArrowTable implements Table, SupportsRead {
    private final StructType schema;

    ArrowTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "kafkafast_arrow";
    }

    @Override
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      return new ArrowScan(schema, new HashMap<>(options.asCaseSensitiveMap()));
    }
  }

  /** Scan builder and scan in one: the columns the query reads, then the planned ranges. */
  static final class ArrowScan implements ScanBuilder, SupportsPushDownRequiredColumns, Scan, Batch {
    private StructType required;
    private final HashMap<String, String> options;

    ArrowScan(StructType schema, HashMap<String, String> options) {
      this.required = schema;
      this.options = options;
    }

    @Override
    public void pruneColumns(StructType requiredSchema) {
      this.required = requiredSchema;
    }

    @Override
    public Scan build() {
      return this;
    }

    @Override
    public StructType readSchema() {
      return required;
    }

    @Override
    public String description() {
      return "kafkafast_arrow" + options.keySet();
    }

    @Override
    public Batch toBatch() {
      return this;
    }

    @Override
    public InputPartition[] planInputPartitions() {
      Map<String, Object> req = new HashMap<>();
      req.put("op", "plan");
      req.put("options", options);
      JsonNode answer = PythonPipe.get().plan(req);
      if (answer.has("error")) {
        throw new IllegalArgumentException("kafkafast_arrow: " + answer.get("error").asText());
      }
      String[] columns = required.fieldNames();
      List<InputPartition> out = new ArrayList<>();
      for (JsonNode r : answer.get("ranges")) {
        out.add(new RangePartition(options, columns, r.get(0).asText(), r.get(1).asInt(), r.get(2).asLong(),
            r.get(3).asLong()));
      }
      return out.toArray(new InputPartition[0]);
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return new ReaderFactory();
    }
  }

  /** One Spark task: [start, until) of one partition, the columns to read. */
  static final class RangePartition implements InputPartition, Serializable {
    final HashMap<String, String> options;
    final String[] columns;
    final String topic;
    final int partition;
    final long start;
    final long until;

    RangePartition(HashMap<String, String> options, String[] columns, String topic, int partition, long start,
        long until) {
      this.options = options;
      this.columns = columns;
      this.topic = topic;
      this.partition = partition;
      this.start = start;
      this.until = until;
    }

    String describe() {
      return topic + "-" + partition + " [" + start + ", " + until + ")";
    }
  }

  static final class ReaderFactory implements PartitionReaderFactory {
    @Override
    public boolean supportColumnarReads(InputPartition partition) {
      return true;
    }

    @Override
    public PartitionReader<InternalRow> createReader(InputPartition partition) {
      throw new UnsupportedOperationException("kafkafast_arrow reads columnar batches only");
    }

    @Override
    public PartitionReader<ColumnarBatch> createColumnarReader(InputPartition partition) {
      try {
        return new ColumnarReader((RangePartition) partition);
      } catch (IOException e) {
        throw new RuntimeException("kafkafast_arrow: cannot start reading " + ((RangePartition) partition).describe()
            + ": " + e.getMessage() + PythonPipe.get().stderrTail(), e);
      }
    }
  }

  /** Reads one range's Arrow stream from a child of the Python process. */
  static final class ColumnarReader implements PartitionReader<ColumnarBatch> {
    private final RangePartition part;
    private final SocketChannel channel;
    private final DataInputStream in;
    private final BufferAllocator allocator;
    private final ArrowStreamReader reader;
    private ColumnarBatch current;
    private boolean closed;

    ColumnarReader(RangePartition part) throws IOException {
      this.part = part;
      Map<String, Object> req = new HashMap<>();
      req.put("op", "read");
      req.put("options", part.options);
      req.put("range", new Object[] {part.topic, part.partition, part.start, part.until});
      req.put("columns", part.columns);
      this.channel = PythonPipe.get().connect();
      OutputStream out = Channels.newOutputStream(channel);
      out.write(JSON.writeValueAsBytes(req));
      out.write('\n');
      out.flush();
      this.in = new DataInputStream(new BufferedInputStream(Channels.newInputStream(channel), 1 << 20));
      this.allocator = new RootAllocator(Long.MAX_VALUE);
      this.reader = new ArrowStreamReader(in, allocator);
      TaskContext tc = TaskContext.get();
      if (tc != null) {
        tc.addTaskCompletionListener((org.apache.spark.util.TaskCompletionListener) ctx -> close());
      }
    }

    private RuntimeException failure(String why, Throwable cause) {
      return new RuntimeException("kafkafast_arrow: reading " + part.describe() + " failed: " + why, cause);
    }

    @Override
    public boolean next() throws IOException {
      boolean more;
      try {
        more = reader.loadNextBatch();
      } catch (IOException e) {
        throw failure(e.toString() + PythonPipe.get().stderrTail(), e);
      }
      if (more) {
        VectorSchemaRoot root = reader.getVectorSchemaRoot();
        ColumnVector[] vectors = new ColumnVector[root.getFieldVectors().size()];
        for (int i = 0; i < vectors.length; i++) {
          vectors[i] = new ArrowColumnVector(root.getVector(i));
        }
        current = new ColumnarBatch(vectors, root.getRowCount());
        return true;
      }
      byte[] trailer = new byte[4];
      try {
        in.readFully(trailer);
      } catch (EOFException e) {
        throw failure("the reader process ended before the end of the range" + PythonPipe.get().stderrTail(), e);
      }
      String t = new String(trailer, StandardCharsets.US_ASCII);
      if (t.equals("KFER")) {
        byte[] message = new byte[Math.min(in.readInt(), 1 << 20)];
        in.readFully(message);
        throw failure(new String(message, StandardCharsets.UTF_8), null);
      }
      if (!t.equals("KFOK")) {
        throw failure("unexpected trailer " + t, null);
      }
      return false;
    }

    @Override
    public ColumnarBatch get() {
      return current;
    }

    @Override
    public synchronized void close() {
      if (closed) {
        return;
      }
      closed = true;
      try {
        reader.close();
      } catch (Exception ignored) {
        // the channel is closed below either way
      }
      try {
        channel.close();
      } catch (IOException ignored) {
        // nothing left to release
      }
      allocator.close();
    }
  }

  /** The Python process of this JVM (arrow_pipe.py), started on first use, restarted if it died. */
  static final class PythonPipe {
    private static PythonPipe instance;
    private final Process process;
    private final File socket;
    private final File stderr;

    static synchronized PythonPipe get() {
      if (instance == null || !instance.process.isAlive()) {
        try {
          instance = new PythonPipe();
        } catch (IOException e) {
          throw new RuntimeException("kafkafast_arrow: cannot start the Python reader process: " + e.getMessage(), e);
        }
      }
      return instance;
    }

    private static String python() {
      SparkEnv env = SparkEnv.get();
      String exe = null;
      if (env != null) {
        boolean driver = "driver".equals(env.executorId());
        if (driver) {
          exe = env.conf().get("spark.pyspark.driver.python", null);
        }
        if (exe == null) {
          exe = env.conf().get("spark.pyspark.python", null);
        }
      }
      if (exe == null) {
        exe = System.getenv("PYSPARK_PYTHON");
      }
      return exe == null ? "python3" : exe;
    }

    private static String pythonPath() {
      List<String> parts = new ArrayList<>();
      try {
        File root = new File(SparkFiles.getRootDirectory());
        parts.add(root.getPath());
        File[] files = root.listFiles();
        if (files != null) {
          for (File f : files) {
            String n = f.getName();
            if (n.endsWith(".zip") || n.endsWith(".egg") || n.endsWith(".whl")) {
              parts.add(f.getPath());
            }
          }
        }
      } catch (RuntimeException e) {
        // no SparkEnv (not in Spark): the environment's PYTHONPATH only
      }
      String existing = System.getenv("PYTHONPATH");
      if (existing != null && !existing.isEmpty()) {
        parts.add(existing);
      }
      return String.join(File.pathSeparator, parts);
    }

    private PythonPipe() throws IOException {
      File dir = Files.createTempDirectory("kafkafast-arrow").toFile();
      dir.deleteOnExit();
      socket = new File(dir, "pipe.sock");
      stderr = new File(dir, "stderr.txt");
      ProcessBuilder pb = new ProcessBuilder(python(), "-m", "pyspark_kafkafast.arrow_pipe", socket.getPath());
      pb.environment().put("PYTHONPATH", pythonPath());
      pb.redirectError(stderr);
      process = pb.start();
      Runtime.getRuntime().addShutdownHook(new Thread(process::destroyForcibly));
      BufferedReader out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
      String line = out.readLine();
      if (!"READY".equals(line)) {
        try {
          process.waitFor(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
          Thread.currentThread().interrupt();
        }
        process.destroyForcibly();
        throw new IOException("it did not start (" + python() + "): " + stderrTail());
      }
    }

    String stderrTail() {
      try {
        String text = new String(Files.readAllBytes(stderr.toPath()), StandardCharsets.UTF_8);
        return text.isEmpty() ? "" : "\n" + text.substring(Math.max(0, text.length() - 4000));
      } catch (IOException e) {
        return "";
      }
    }

    SocketChannel connect() throws IOException {
      SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
      ch.connect(UnixDomainSocketAddress.of(socket.toPath()));
      return ch;
    }

    JsonNode plan(Map<String, Object> req) {
      try (SocketChannel ch = connect()) {
        OutputStream out = Channels.newOutputStream(ch);
        out.write(JSON.writeValueAsBytes(req));
        out.write('\n');
        out.flush();
        InputStream in = Channels.newInputStream(ch);
        String line = new BufferedReader(new InputStreamReader(in, StandardCharsets.UTF_8)).readLine();
        if (line == null) {
          throw new IOException("no answer" + stderrTail());
        }
        return JSON.readTree(line);
      } catch (IOException e) {
        throw new RuntimeException("kafkafast_arrow: planning failed: " + e.getMessage(), e);
      }
    }
  }
}
