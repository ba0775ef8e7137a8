"""Every client driver by name, in the order the tests are parametrized, with the lists the tests
take from their capabilities.

Importing this imports every client library, on purpose: a test module that imports it fails to
collect (a failure, not a skip) when a Python client is missing. ``conftest.py`` does not import it
at module level, so the server's own tests in this folder do not depend on the clients extra.
"""

from __future__ import annotations

import external_tools

from .aiokafka_driver import AiokafkaDriver
from .confluent_driver import ConfluentDriver
from .kafka_python_driver import KafkaPythonDriver
from .kafkajs_driver import KafkajsDriver
from .kcat_driver import KcatDriver

DRIVER_CLASSES = {
    "kafka-python": KafkaPythonDriver,
    "confluent-kafka": ConfluentDriver,
    "aiokafka": AiokafkaDriver,
    "kcat": KcatDriver,
    "kafkajs": KafkajsDriver,
}
CONSUMERS = [name for name, cls in DRIVER_CLASSES.items() if cls.can_consume]
ADMINS = [name for name, cls in DRIVER_CLASSES.items() if cls.admin]


def runnable(names) -> list[str]:
    """``names`` without kcat or kafkajs where that tool is missing and not required
    (``external_tools``), for tests that check every client in a loop: the others are still checked."""
    return [name for name in names
            if name not in ("kcat", "kafkajs") or external_tools.available(name) or external_tools.required(name)]
