"""How a planned rank maps onto Docker: its container (create, list, inspect, logs) and its readiness."""
