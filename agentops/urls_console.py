from django.urls import path

app_name = "console"
urlpatterns: list = []
