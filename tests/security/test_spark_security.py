"""The Spark source and sink (`kafkafast`, and the JVM reader `kafkafast_arrow`) over a SASL_SSL
listener with ACLs, configured with the `kafka.`-prefixed option names spark-sql-kafka passes
to its clients: reads and writes with PLAIN, SCRAM-SHA-256 and OAUTHBEARER (batch and
streaming); a topic the principal may not describe or read fails the query with
TOPIC_AUTHORIZATION_FAILED; a setting that cannot be honoured fails at planning time with
a message naming the option. Topics and ACLs are set up, and results checked, with
confluent-kafka over the broker's PLAINTEXT listener (an operators' back door here)."""
from __future__ import annotations

import pytest

from tests.integration.spark_topics import consume_all, create_topic, fill
from tests.security.conftest import PLAIN_JAAS
from tests.security.pki import make_pki
from tests.support.broker_process import BrokerProcess, free_port

pytest.importorskip("pyspark")
pytestmark = pytest.mark.timeout(300)

SCRAM_USER = ("carol", "carol-256")
OAUTH_JAAS = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
              'unsecuredLoginStringClaim_sub="erin";')
N = 300


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    base = tmp_path_factory.mktemp("spark-sec")
    pki = make_pki(base / "pki")
    plain, sasl_ssl = free_port(), free_port()
    broker = BrokerProcess(base / "data", port=plain, settings={
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_SSL://127.0.0.1:{sasl_ssl}",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(pki.server_keystore),
        "ssl.key.password": pki.key_password, "ssl.truststore.type": "PEM", "ssl.truststore.location": str(pki.ca),
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,OAUTHBEARER",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": PLAIN_JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "connection.failed.authentication.delay.ms": "20",
    }).start()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cred = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for fut in admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(SCRAM_USER[0], cred, SCRAM_USER[1].encode())]).values():
        fut.result(30)
    for topic in ("sec-in", "denied", "describe-only"):
        create_topic(broker.bootstrap, topic, 2)
        fill(broker.bootstrap, topic, 2, 0, N)
    bindings = [AclBinding(ResourceType.TOPIC, "sec-", ResourcePatternType.PREFIXED, f"User:{user}", "*",
                           AclOperation.ALL, AclPermissionType.ALLOW) for user in ("alice", "carol", "erin")]
    bindings.append(AclBinding(ResourceType.TOPIC, "describe-only", ResourcePatternType.LITERAL, "User:alice", "*",
                               AclOperation.DESCRIBE, AclPermissionType.ALLOW))
    # exactlyOnce: alice's transactional ids, and the group of the same name each records its batch id in
    bindings += [AclBinding(rtype, "sec-tx", ResourcePatternType.PREFIXED, "User:alice", "*", AclOperation.ALL,
                            AclPermissionType.ALLOW) for rtype in (ResourceType.TRANSACTIONAL_ID, ResourceType.GROUP)]
    for fut in admin.create_acls(bindings).values():
        fut.result(30)
    yield pki, broker, f"127.0.0.1:{sasl_ssl}"
    broker.kill()


@pytest.fixture(scope="module")
def spark():
    from tests.integration.spark_fixtures import shared_spark_session

    return shared_spark_session()


def security(pki, mechanism: str = "PLAIN") -> dict[str, str]:
    """The options a spark-sql-kafka job sets for SASL_SSL."""
    jaas = {
        "PLAIN": 'org.apache.kafka.common.security.plain.PlainLoginModule required username="alice" '
                 'password="alice-secret";',
        "SCRAM-SHA-256": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                         f'username="{SCRAM_USER[0]}" password="{SCRAM_USER[1]}";',
        "OAUTHBEARER": OAUTH_JAAS,
    }[mechanism]
    return {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": mechanism,
            "kafka.sasl.jaas.config": jaas, "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": str(pki.ca), "kafka.ssl.endpoint.identification.algorithm": "https"}


def read(spark, fmt: str, bootstrap: str, topic: str, options: dict):
    return (spark.read.format(fmt).option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
            .options(**options).load())


def values_of(df) -> list[bytes]:
    return sorted(bytes(r.value) for r in df.select("value").collect())


EXPECTED = sorted(b"v%d" % i for i in range(N))


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "OAUTHBEARER"])
def test_batch_read_and_write_over_sasl_ssl(spark, env, mechanism):
    pki, broker, secure = env
    opts = security(pki, mechanism)
    assert values_of(read(spark, "kafkafast", secure, "sec-in", opts)) == EXPECTED
    out = f"sec-out-{mechanism.lower()}"
    create_topic(broker.bootstrap, out, 1)
    (spark.createDataFrame([(b"k%d" % i, b"w%d" % i) for i in range(20)], "key binary, value binary")
     .write.format("kafkafast").option("kafka.bootstrap.servers", secure).option("topic", out).options(**opts)
     .mode("append").save())
    assert sorted(v for _, _, _, v, _ in consume_all(broker.bootstrap, out, 1)) == sorted(b"w%d" % i for i in range(20))


def test_jvm_reader_and_exactly_once_streaming_over_sasl_ssl(spark, env, tmp_path):
    """The streaming write is exactlyOnce: its tasks' transactions, the batch id lookup
    and the driver's commit all log in."""
    pki, broker, secure = env
    opts = security(pki)
    assert values_of(read(spark, "kafkafast_arrow", secure, "sec-in", opts)) == EXPECTED
    create_topic(broker.bootstrap, "sec-stream-out", 2)
    stream = (spark.readStream.format("kafkafast").option("kafka.bootstrap.servers", secure)
              .option("subscribe", "sec-in").option("startingOffsets", "earliest").options(**opts).load()
              .selectExpr("key", "value", "partition"))
    query = (stream.writeStream.format("kafkafast").option("kafka.bootstrap.servers", secure)
             .option("topic", "sec-stream-out").options(**opts)
             .option("exactlyOnce", "true").option("transactionalIdPrefix", "sec-tx")
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    # librdkafka reads read_committed by default: the records are there once the driver committed
    assert sorted(v for _, _, _, v, _ in consume_all(broker.bootstrap, "sec-stream-out", 2)) == EXPECTED


def test_denied_topics_fail_the_query_with_topic_authorization_failed(spark, env):
    """No DESCRIBE: planning fails; DESCRIBE without READ: the tasks' Fetch fails; no WRITE:
    the write fails. Never an empty result taken as the topic's contents."""
    pki, _, secure = env
    opts = security(pki)
    for fmt in ("kafkafast", "kafkafast_arrow"):
        for topic in ("denied", "describe-only"):
            with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
                read(spark, fmt, secure, topic, opts).count()
    with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
        (spark.createDataFrame([(b"x",)], "value binary").write.format("kafkafast")
         .option("kafka.bootstrap.servers", secure).option("topic", "denied").options(**opts).mode("append").save())


@pytest.mark.parametrize(("option", "value", "named"), [
    ("kafka.ssl.truststore.type", "JKS", "kafka.ssl.truststore.type"),
    ("kafka.ssl.truststore.location", "/nonexistent/ca.pem", "kafka.ssl.truststore.location"),
    ("kafka.ssl.cipher.suites", "TLS_AES_128_GCM_SHA256", "kafka.ssl.cipher.suites"),
    ("kafka.sasl.mechanism", "GSSAPI", "kafka.sasl.mechanism"),
    ("kafka.sasl.login.callback.handler.class", "com.example.Handler", "kafka.sasl.login.callback.handler.class"),
    ("kafka.security.protocol", "SASL_TLS", "kafka.security.protocol"),
    ("kafka.group.id", "analytics", "kafka.group.id"),
    ("groupIdPrefix", "analytics", "groupIdPrefix"),
    ("kafka.max.poll.records", "10", "kafka.max.poll.records"),
])
def test_an_option_that_cannot_be_honoured_fails_at_planning_naming_it(spark, env, option, value, named):
    pki, _, secure = env
    opts = {**security(pki), option: value}
    for fmt in ("kafkafast", "kafkafast_arrow"):
        with pytest.raises(Exception, match="(?i)" + named.replace(".", r"\.")):  # Spark lower-cases option names
            read(spark, fmt, secure, "sec-in", opts).count()
    if option != "groupIdPrefix":  # a source option only
        with pytest.raises(Exception, match="(?i)" + named.replace(".", r"\.")):
            (spark.createDataFrame([(b"x",)], "value binary").write.format("kafkafast")
             .option("kafka.bootstrap.servers", secure).option("topic", "sec-in").options(**opts)
             .mode("append").save())
