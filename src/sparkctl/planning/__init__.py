"""Planning: profile + mode -> the Plan (ranks, argv, env, mounts, router) the lifecycle runs."""
