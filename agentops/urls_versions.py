from django.urls import path

app_name = "versions"
urlpatterns: list = []
