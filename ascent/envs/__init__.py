"""Environments ascent ships in other libraries' protocols, to train on and to test adapters
against: each is served by that library's own server code, never imported by ascent itself."""
