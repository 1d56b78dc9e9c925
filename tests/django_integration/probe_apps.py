"""What the settings of the probe projects these tests write share: the apps (the
backport's own under Django 5.2) and the basics. Each settings text imports `django`
before them."""

APPS = """
SECRET_KEY = "test-only"
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["conveyor.django", "probe"]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")
"""
