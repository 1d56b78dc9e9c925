# Thin aliases for dev.py, which needs nothing but Python 3.11+ and pip.
PY ?= python3
.PHONY: test demo bench
test:
	$(PY) dev.py test
demo:
	$(PY) dev.py demo
bench:
	$(PY) dev.py bench
