"""The project's own tests use its pytest plugin, opted in here as users do."""

pytest_plugins = ["liftbridge_client.testing.plugin"]
