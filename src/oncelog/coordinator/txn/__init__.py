"""The transaction coordinator: Kafka's two-phase commit for transactional producers."""
