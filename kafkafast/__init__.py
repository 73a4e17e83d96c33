"""kafkafast: a Kafka-compatible broker in Python with Cython on the hot paths."""
__version__ = "0.1.0"
