"""`make compat`: other people's Kafka clients, tools and test suites against a real `kfs serve`.

Each suite (`compat.kafka_tools`, `compat.franz_go`) runs against a daemon
started here and reports one `Outcome` per test.  `compat.suites` compares
the outcomes with the checked-in list of expected failures
(``compat/expected_failures.txt``, each with its reason) and prints one
table: a new failure, or an expected failure that now passes, turns the run
red, so the list can only shrink.  ``python -m compat --help`` lists the
suites and their flags; `make test` runs a short form of each
(``tests/compat/``).
"""
