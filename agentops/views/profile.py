"""A person's console settings: the time zone every time on the console is shown in."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from agentops.context import remember_time_zone
from agentops.forms import ProfileForm
from agentops.models import OperatorProfile


@login_required
def profile(request: HttpRequest) -> HttpResponse:
    """Any signed-in person may set their own settings, whatever their permissions."""
    user_id = request.user.pk
    assert user_id is not None  # login_required
    current = OperatorProfile.objects.filter(user_id=user_id).first()
    if request.method == "POST":
        form = ProfileForm(request.POST)
        if form.is_valid():
            time_zone = form.cleaned_data["time_zone"]
            OperatorProfile.objects.update_or_create(
                user_id=user_id, defaults={"time_zone": time_zone}
            )
            remember_time_zone(request, time_zone)
            messages.success(request, "Saved: times are now shown in the time zone you chose.")
            return redirect("console:profile")
        return render(request, "agentops/profile.html", {"form": form}, status=400)
    form = ProfileForm(initial={"time_zone": current.time_zone if current else ""})
    return render(request, "agentops/profile.html", {"form": form})
