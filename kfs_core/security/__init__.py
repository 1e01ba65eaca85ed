"""Security: listeners and TLS, SASL (PLAIN, SCRAM-SHA-256/512) and its users.

- `listeners` -- Kafka's ``listeners`` / ``advertised.listeners`` shape
  (``SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092``), one security
  protocol per listener;
- `tls` -- the server's TLS context from PEM files (TLS 1.2 at least,
  optional client CA for mutual TLS, reloadable), and the principal a client
  certificate names;
- `scram` -- SCRAM (RFC 5802, RFC 7677): credentials from a password, the
  server side of the exchange, and PLAIN checked against the same salted
  credentials (no clear-text password is ever stored);
- `users` -- the SCRAM credentials kept in the store beside the catalog,
  so every daemon on a namespace sees the same users;
- `sasl` -- one connection's SASL state machine (SaslHandshake,
  SaslAuthenticate, re-authentication) and the delay that grows with
  repeated failures from one address.
"""
