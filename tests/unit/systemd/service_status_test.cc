// ServiceStatus: READY=1 once, then STATUS= lines on role and head changes, as received
// by a NOTIFY_SOCKET listener.
#include "daemon/systemd/service_status.h"

#include <string>

#include <catch2/catch.hpp>

#include "notify_listener.h"

using traintl::systemd::NodeState;
using traintl::systemd::Notifier;
using traintl::systemd::ServiceStatus;
using traintl::systemd::testing::NotifyListener;
using namespace std::chrono_literals;

TEST_CASE("READY=1 waits for the API, membership and a head, then STATUS= on changes") {
  NotifyListener listener;
  Notifier notifier(listener.path());
  ServiceStatus status(&notifier);
  NodeState s;

  CHECK(status.Update(s) == "STATUS=starting");
  CHECK(listener.Receive() == "STATUS=starting");
  CHECK(status.Update(s).empty());  // nothing changed: nothing sent

  s.api_listening = true;
  s.api_address = "127.0.0.1:7450";
  status.Update(s);
  CHECK(listener.Receive() == "STATUS=waiting to join a cluster; API on 127.0.0.1:7450");
  s.member = true;
  status.Update(s);
  CHECK(listener.Receive() ==
        "STATUS=role=agent head=unknown (electing a head); API on 127.0.0.1:7450");
  CHECK_FALSE(status.ready());

  s.is_head = true;
  status.Update(s);
  CHECK(listener.Receive() == "READY=1\nSTATUS=role=head; API on 127.0.0.1:7450");
  CHECK(status.ready());

  // Leadership moves: STATUS only, READY is sent once.
  s.is_head = false;
  s.head = "node-2f00ab12 at 10.0.0.2:7451";
  status.Update(s);
  CHECK(listener.Receive() ==
        "STATUS=role=agent head=node-2f00ab12 at 10.0.0.2:7451; API on 127.0.0.1:7450");
  s.head.clear();
  status.Update(s);
  CHECK(listener.Receive() ==
        "STATUS=role=agent head=unknown (electing a head); API on 127.0.0.1:7450");
  s.is_head = true;
  status.Update(s);
  CHECK(listener.Receive() == "STATUS=role=head; API on 127.0.0.1:7450");
  CHECK(listener.Drain().empty());
}

TEST_CASE("a node that joins an existing cluster is ready once it knows the head") {
  NotifyListener listener;
  Notifier notifier(listener.path());
  ServiceStatus status(&notifier);
  NodeState s;
  s.api_listening = true;
  s.api_address = "10.0.0.3:7450";
  s.member = true;
  s.head = "node-1";
  CHECK(ServiceStatus::IsReady(s));
  status.Update(s);
  CHECK(listener.Receive() == "READY=1\nSTATUS=role=agent head=node-1; API on 10.0.0.3:7450");
}

TEST_CASE("without NOTIFY_SOCKET the status is kept but nothing is sent") {
  Notifier disabled;
  ServiceStatus status(&disabled);
  NodeState s;
  s.api_listening = true;
  s.member = true;
  s.is_head = true;
  s.api_address = "127.0.0.1:1";
  CHECK_FALSE(status.Update(s).empty());
  CHECK(status.ready());
  CHECK(status.last_status() == "role=head; API on 127.0.0.1:1");
}
