"""The ZooKeeper formats of ACLs and SCRAM credentials (security/zk_stores.py) are Kafka's:
what Kafka's tools write is read, and what kafkafast writes is what they expect."""
from kafkafast.security import acl as A
from kafkafast.security.scram import ScramCredential
from kafkafast.security.zk_stores import (credential_text, decode_acls, decode_change, encode_acls, encode_change,
                                          parse_user_config, resource_path, user_path)


def test_acl_znode_json_as_kafka_writes_it():
    r = (A.TOPIC, "orders", A.LITERAL)
    acls = [A.Acl(A.TOPIC, "orders", A.LITERAL, "User:alice", "*", A.READ, A.ALLOW),
            A.Acl(A.TOPIC, "orders", A.LITERAL, "User:*", "10.0.0.1", A.CLUSTER_ACTION, A.DENY)]
    assert encode_acls(acls) == (b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow",'
                                 b'"operation":"Read","host":"*"},{"principal":"User:*","permissionType":"Deny",'
                                 b'"operation":"ClusterAction","host":"10.0.0.1"}]}')
    assert decode_acls(r, encode_acls(acls)) == acls
    assert resource_path(r) == "/kafka-acl/Topic/orders"
    assert resource_path((A.TRANSACTIONAL_ID, "tx-", A.PREFIXED)) == "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    # Kafka 3.x writes the literal change event with the enum's upper-case name: read both
    assert decode_change("/kafka-acl-changes", b"TOPIC:orders") == r
    assert encode_change(r) == ("/kafka-acl-changes", b"Topic:orders")
    root, note = encode_change((A.GROUP, "team-", A.PREFIXED))
    assert root == "/kafka-acl-extended-changes"
    assert decode_change(root, note) == (A.GROUP, "team-", A.PREFIXED)
    assert decode_change(root, b'{"version":1,"resourceType":"GROUP","name":"g","patternType":"PREFIXED"}') == (
        A.GROUP, "g", A.PREFIXED)


def test_scram_user_config_as_kafka_writes_it():
    cred = ScramCredential.from_password("SCRAM-SHA-512", "pw", 8192)
    text = credential_text(cred)
    assert text.startswith("salt=") and ",stored_key=" in text and ",server_key=" in text
    assert text.endswith(",iterations=8192")
    config, creds = parse_user_config(('{"version":1,"config":{"SCRAM-SHA-512":"%s","producer_byte_rate":"1024"}}'
                                       % text).encode())
    assert creds == {"SCRAM-SHA-512": cred} and config["producer_byte_rate"] == "1024"
    assert user_path("alice") == "/config/users/alice"
    assert user_path("CN=a b,O=x*") == "/config/users/CN%3Da%20b%2CO%3Dx%2A"
