"""Model states: the byte ledger per parameter, ZeRO's ownership rules per stage (per worker, cluster, redundancy,
communication), the ledger applied per parameter group, and DeepSpeed's own estimator."""
