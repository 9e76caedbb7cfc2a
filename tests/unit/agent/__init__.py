"""Tests of the node agent (refplatform.agent) and the REST client it uses."""
