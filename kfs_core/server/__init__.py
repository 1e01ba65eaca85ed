"""The daemon's network side: `kfs serve`, its connections, the broker and the Kafka APIs."""
