"""The toolcall env's data: function families, each a lookup (a name → an id) and an action on that id, with typed
parameters (string, integer, number, boolean, enum, array, nested object; required and optional with defaults) and
the English and Chinese requests that ask for them.

A request template writes `{REF}` where the action's object goes ("customer C-4821", or "the customer named Ann Lee"
when the id must be looked up first), `{param}` for a value, and `[param|…]` around the words of an optional
parameter, kept only when the task sets it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # string | integer | number | boolean | enum | array | object
    description: str
    values: tuple[Any, ...] = ()  # what a task draws from (enum members; strings; (low, high) for numbers)
    required: bool = True
    default: Any = None  # for optional parameters: the value when it is left out
    fields: tuple[Param, ...] = ()  # an object's fields (all required)


@dataclass(frozen=True)
class Family:
    id: str
    prefix: str  # of the ids the lookup returns: C-4821
    noun: tuple[str, str]  # (English, Chinese)
    key: Param  # what the lookup takes (a name, a city)
    lookup: tuple[str, str]  # (name, description)
    action: tuple[str, str]
    params: tuple[Param, ...]  # the action's parameters besides the id
    request: tuple[str, str]  # the action's request (English, Chinese)
    ref_id: tuple[str, str] = ("{noun} {id}", "{noun}{id}")
    ref_name: tuple[str, str] = ("the {noun} named {key}", "名叫{key}的{noun}")
    ask_id: tuple[str, str] = ("What is the id of the {noun} named {key}?", "名叫{key}的{noun}的编号是多少？")
    extra: dict[str, Any] = field(default_factory=dict)


NAMES = ("Ann Lee", "Bruno Diaz", "Chen Jing", "Dara Okafor", "Emil Novak", "Fatima Haddad", "Goran Ilic", "Hana Sato",
         "Ivan Petrov", "Jia Wang", "Kofi Mensah", "Lena Berg")
CITIES = ("Lisbon", "Osaka", "Nairobi", "Toronto", "Krakow", "Lyon", "Austin", "Pune", "Quito", "Perth")
DATES = ("2025-03-14", "2025-04-02", "2025-05-20", "2025-06-11", "2025-07-30", "2025-09-05", "2025-10-18")
WORDS = ("blue", "quiet", "fast", "green", "spring", "summer", "local", "vintage", "classic", "bright")
EMAILS = ("ann@example.org", "bruno@example.org", "chen@example.org", "dara@example.org", "emil@example.org")

FAMILIES = (
    Family("customer", "C", ("customer", "客户"), Param("name", "string", "The customer's full name.", NAMES),
           ("find_customer", "Find a customer by name and return the customer id."),
           ("create_order", "Create an order for a customer."),
           (Param("product", "string", "The product to order.", ("lamp", "kettle", "chair", "notebook", "rake")),
            Param("quantity", "integer", "How many units.", (1, 9)),
            Param("express", "boolean", "Ship with express delivery.", (True,), False, False),
            Param("gift_note", "string", "A note to print on the gift wrap.", ("Happy birthday", "Congrats"), False)),
           ("Create an order of {quantity} {product} for {REF}[express| with express delivery][gift_note| and the gift note "
            "\"{gift_note}\"].", "给{REF}下一个订单：{product} {quantity}件[express|，走加急配送][gift_note|，礼品卡写\"{gift_note}\"]。")),
    Family("flight", "AP", ("airport", "机场"), Param("city", "string", "The city the airport serves.", CITIES),
           ("find_airport", "Find the main airport of a city and return its id."),
           ("book_flight", "Book a flight departing from an airport."),
           (Param("date", "string", "The departure date, YYYY-MM-DD.", DATES),
            Param("cabin", "enum", "The cabin class.", ("economy", "business", "first"), False, "economy"),
            Param("passengers", "integer", "Number of passengers.", (1, 4), False, 1)),
           ("Book a flight from {REF} on {date}[cabin| in {cabin} class][passengers| for {passengers} passengers].",
            "帮我订{date}从{REF}出发的航班[cabin|，{cabin}舱][passengers|，{passengers}位乘客]。"),
           ref_name=("the airport of {key}", "{key}的机场"), ask_id=("What is the id of the airport of {key}?",
                                                                      "{key}的机场编号是多少？")),
    Family("library", "B", ("book", "图书"), Param("title", "string", "The book's title.",
                                                  ("Dune", "Emma", "Beloved", "Ulysses", "Solaris", "Kindred")),
           ("find_book", "Find a book by title and return its id."),
           ("reserve_book", "Reserve a book at a library branch."),
           (Param("branch", "enum", "The branch to pick it up at.", ("central", "north", "riverside")),
            Param("weeks", "integer", "How many weeks to keep it.", (1, 6), False, 2)),
           ("Reserve {REF} at the {branch} branch[weeks| for {weeks} weeks].", "在{branch}分馆预约{REF}[weeks|，借{weeks}周]。"),
           ref_name=("the book titled {key}", "书名为{key}的图书"), ask_id=("What is the id of the book titled {key}?",
                                                                          "书名为{key}的图书的编号是多少？")),
    Family("music", "AR", ("artist", "歌手"), Param("name", "string", "The artist's name.", NAMES),
           ("find_artist", "Find an artist by name and return the artist id."),
           ("create_playlist", "Create a playlist of an artist's songs."),
           (Param("title", "string", "The playlist's title.", WORDS),
            Param("tags", "array", "Labels for the playlist.", WORDS, False),
            Param("shuffle", "boolean", "Play in random order.", (True,), False, False)),
           ("Make a playlist called \"{title}\" with songs by {REF}[tags|, tagged {tags}][shuffle|, shuffled].",
            "用{REF}的歌建一个歌单，名字叫\"{title}\"[tags|，标签是{tags}][shuffle|，随机播放]。")),
    Family("support", "T", ("ticket", "工单"), Param("subject", "string", "Words from the ticket's subject.",
                                                    ("login fails", "slow page", "refund", "broken link", "typo")),
           ("find_ticket", "Find a support ticket by its subject and return the ticket id."),
           ("update_ticket", "Change a support ticket's priority and assignee."),
           (Param("priority", "enum", "The new priority.", ("low", "medium", "high", "urgent")),
            Param("assignee", "string", "Who should handle it.", NAMES, False)),
           ("Set the priority of {REF} to {priority}[assignee| and assign it to {assignee}].",
            "把{REF}的优先级改成{priority}[assignee|，并分配给{assignee}]。"),
           ref_name=("the ticket about \"{key}\"", "主题为\"{key}\"的工单"),
           ask_id=("What is the id of the ticket about \"{key}\"?", "主题为\"{key}\"的工单编号是多少？")),
    Family("shipping", "O", ("order", "订单"), Param("reference", "string", "The order's reference code.",
                                                    ("REF-11", "REF-27", "REF-35", "REF-48", "REF-52")),
           ("find_order", "Find an order by its reference code and return the order id."),
           ("ship_order", "Ship an order to an address."),
           (Param("carrier", "enum", "The delivery company.", ("dhl", "ups", "fedex")),
            Param("address", "object", "Where to deliver.", fields=(
                Param("street", "string", "Street and number.", ("5 Main St", "12 Oak Ave", "3 Rue Verte")),
                Param("city", "string", "City.", CITIES))),
            Param("insured", "boolean", "Insure the parcel.", (True,), False, False)),
           ("Ship {REF} with {carrier} to {address.street}, {address.city}[insured|, insured].",
            "用{carrier}把{REF}寄到{address.city}{address.street}[insured|，并投保]。"),
           ref_name=("the order with reference {key}", "参考号为{key}的订单"),
           ask_id=("What is the id of the order with reference {key}?", "参考号为{key}的订单编号是多少？")),
    Family("calendar", "P", ("contact", "联系人"), Param("name", "string", "The contact's full name.", NAMES),
           ("find_contact", "Find a contact by name and return the contact id."),
           ("schedule_meeting", "Schedule a meeting with a contact."),
           (Param("date", "string", "The meeting day, YYYY-MM-DD.", DATES),
            Param("topic", "string", "What the meeting is about.", ("budget", "hiring", "roadmap", "launch")),
            Param("duration_minutes", "integer", "Length of the meeting.", (15, 90), False, 30)),
           ("Schedule a meeting about {topic} with {REF} on {date}[duration_minutes| for {duration_minutes} minutes].",
            "和{REF}约一个{date}的会议，主题是{topic}[duration_minutes|，时长{duration_minutes}分钟]。")),
    Family("finance", "A", ("account", "账户"), Param("owner", "string", "The account owner's name.", NAMES),
           ("find_account", "Find a bank account by its owner and return the account id."),
           ("transfer_funds", "Send money to an account."),
           (Param("amount", "number", "How much to send.", (5, 500)),
            Param("currency", "enum", "The currency.", ("USD", "EUR", "CNY", "JPY")),
            Param("memo", "string", "A note for the recipient.", ("rent", "dinner", "tickets"), False)),
           ("Send {amount} {currency} to {REF}[memo| with the memo \"{memo}\"].",
            "给{REF}转{amount} {currency}[memo|，备注\"{memo}\"]。"),
           ref_name=("the account of {key}", "{key}的账户"), ask_id=("What is the id of the account of {key}?",
                                                                      "{key}的账户编号是多少？")),
    Family("course", "S", ("student", "学生"), Param("name", "string", "The student's full name.", NAMES),
           ("find_student", "Find a student by name and return the student id."),
           ("enroll_student", "Enroll a student in a course."),
           (Param("course", "string", "The course code.", ("MATH101", "BIO210", "ART150", "CS300")),
            Param("credits", "integer", "Credits for the course.", (1, 6)),
            Param("audit", "boolean", "Take it without a grade.", (True,), False, False)),
           ("Enroll {REF} in {course} for {credits} credits[audit| as an auditor].",
            "给{REF}选{course}课，{credits}个学分[audit|，旁听]。")),
    Family("news", "TP", ("topic", "话题"), Param("keyword", "string", "A keyword of the topic.",
                                                 ("climate", "chess", "football", "startups", "space")),
           ("find_topic", "Find a news topic by keyword and return the topic id."),
           ("subscribe_topic", "Subscribe an email address to a news topic."),
           (Param("email", "string", "The subscriber's email.", EMAILS),
            Param("frequency", "enum", "How often to send news.", ("daily", "weekly", "monthly"), False, "daily")),
           ("Subscribe {email} to {REF}[frequency| with {frequency} emails].", "给{email}订阅{REF}[frequency|，{frequency}推送]。"),
           ref_name=("the topic about {key}", "关于{key}的话题"), ask_id=("What is the id of the topic about {key}?",
                                                                          "关于{key}的话题编号是多少？")),
    # held out: evaluation only (HELD_OUT), so the eval split asks for functions never trained on
    Family("hotel", "H", ("hotel", "酒店"), Param("city", "string", "The city the hotel is in.", CITIES),
           ("find_hotel", "Find the best-rated hotel in a city and return its id."),
           ("book_room", "Book a room at a hotel."),
           (Param("check_in", "string", "The arrival date, YYYY-MM-DD.", DATES),
            Param("nights", "integer", "How many nights.", (1, 7)),
            Param("breakfast", "boolean", "Include breakfast.", (True,), False, False),
            Param("guests", "object", "Who is staying.", fields=(
                Param("adults", "integer", "Adults.", (1, 3)), Param("children", "integer", "Children.", (0, 2))))),
           ("Book {REF} from {check_in} for {nights} nights for {guests.adults} adults and {guests.children} "
            "children[breakfast| with breakfast].", "预订{REF}，{check_in}入住{nights}晚，{guests.adults}位成人、"
                                          "{guests.children}位儿童[breakfast|，含早餐]。"),
           ref_name=("the best hotel in {key}", "{key}最好的酒店"), ask_id=("What is the id of the best hotel in {key}?",
                                                                          "{key}最好的酒店编号是多少？")),
    Family("thermostat", "D", ("device", "设备"), Param("room", "string", "The room the thermostat is in.",
                                                     ("kitchen", "office", "bedroom", "lobby", "garage")),
           ("find_device", "Find the thermostat of a room and return its device id."),
           ("set_thermostat", "Set a thermostat's target temperature."),
           (Param("temperature", "number", "Target temperature in degrees Celsius.", (16, 26)),
            Param("mode", "enum", "Heating mode.", ("heat", "cool", "auto"), False, "auto")),
           ("Set {REF} to {temperature} degrees[mode| in {mode} mode].", "把{REF}调到{temperature}度[mode|，{mode}模式]。"),
           ref_name=("the thermostat in the {key}", "{key}的温控器"),
           ask_id=("What is the device id of the thermostat in the {key}?", "{key}的温控器设备编号是多少？")),
    Family("recipe", "R", ("recipe", "菜谱"), Param("dish", "string", "The dish's name.",
                                                   ("ramen", "paella", "curry", "lasagna", "dumplings")),
           ("find_recipe", "Find a recipe by dish name and return the recipe id."),
           ("scale_recipe", "Rescale a recipe's ingredients."),
           (Param("servings", "integer", "How many servings.", (2, 12)),
            Param("units", "enum", "Measurement system.", ("metric", "imperial"), False, "metric"),
            Param("skip", "array", "Ingredients to leave out.", ("salt", "sugar", "garlic", "chili"), False)),
           ("Scale {REF} to {servings} servings[units| in {units} units][skip| without {skip}].",
            "把{REF}调整成{servings}人份[units|，用{units}单位][skip|，去掉{skip}]。"),
           ref_name=("the {key} recipe", "{key}的菜谱"), ask_id=("What is the id of the {key} recipe?",
                                                                  "{key}的菜谱编号是多少？")),
)
HELD_OUT = {"hotel", "thermostat", "recipe"}
BY_ID = {f.id: f for f in FAMILIES}
