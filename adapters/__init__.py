"""Storage adapters and integrations for saga, installed as ``saga.adapters``."""
